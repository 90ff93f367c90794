"""Helpers the agent loop uses around a parsed response: the parse-issue note for the trace,
the text the user sees, and the assistant turn stored for native tool calling."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._calls import ToolCall
from ._json_values import _json_dumps
from ._text import _trim

_PARSE_ISSUE_MARKERS = ("<tool_call", "<toolcall", "<tool-call", "```tool_call", "```toolcall",
                        "```tool-call", "```tool file_", "```tool shell", "```tool web_",
                        "```tool memory_", "```tool ", '"tool_calls"', "TOOL_CALL", "<FunctionCall>")
PARSE_ISSUE = "response resembled a tool-call payload but no valid tool call could be parsed"


def detect_tool_call_parse_issue(text: str, calls: Sequence[object]) -> str | None:
    """A note for the trace when a response looks like a tool call but none was parsed."""
    if calls:
        return None
    trimmed = _trim(text)
    if trimmed and any(marker in trimmed for marker in _PARSE_ISSUE_MARKERS):
        return PARSE_ISSUE
    return None


def resolve_display_text(response_text: str, parsed_text: str, has_tool_calls: bool,
                         has_native_tool_calls: bool) -> str:
    """What the user sees of one model response.

    With calls: the parsed text, else the raw text when the calls were native, else nothing (so
    a raw tool payload is never shown). Without calls: the parsed text, else the raw text.
    """
    if has_tool_calls:
        if _trim(parsed_text):
            return parsed_text
        return response_text if has_native_tool_calls else ""
    return parsed_text if _trim(parsed_text) else response_text


def _field(item: Any, name: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(name)
    return getattr(item, name, None)


def _history_json(text: str, calls: list[dict[str, Any]], reasoning: str | None) -> str:
    content = _trim(text)
    obj: dict[str, Any] = {"content": content or None, "tool_calls": calls}
    if reasoning is not None:
        obj["reasoning_content"] = reasoning
    return _json_dumps(obj)


def build_native_assistant_history(text: str, tool_calls: Iterable[Any],
                                   reasoning_content: str | None = None) -> str:
    """The assistant turn of a native tool-call exchange as the JSON string ZeroClaw stores:
    ``{"content", "reasoning_content"?, "tool_calls": [{"arguments", "id", "name"}]}``, keys
    sorted. Each call is a mapping or object with ``id``, ``name`` and ``arguments`` (a JSON
    string; other values are serialised)."""
    calls = []
    for call in tool_calls:
        arguments = _field(call, "arguments")
        if not isinstance(arguments, str):
            arguments = _json_dumps(arguments if arguments is not None else {})
        calls.append({"id": _field(call, "id"), "name": _field(call, "name"),
                      "arguments": arguments})
    return _history_json(text, calls, reasoning_content)


def build_native_assistant_history_from_parsed_calls(text: str, tool_calls: Sequence[ToolCall],
                                                     reasoning_content: str | None = None
                                                     ) -> str | None:
    """Like ``build_native_assistant_history`` for text-parsed calls; None when there are no
    calls or one has no id (a strict provider would refuse the turn)."""
    if not tool_calls or any(call.id is None for call in tool_calls):
        return None
    calls = [{"id": call.id, "name": call.name, "arguments": _json_dumps(call.arguments)}
             for call in tool_calls]
    return _history_json(text, calls, reasoning_content)
