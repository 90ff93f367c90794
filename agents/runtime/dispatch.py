"""Native and prompt-guided (XML) tool dispatch.

* ``NativeToolDispatcher``: tool specs travel in ``ChatRequest.tools``; the provider returns
  ``ToolUseBlock``s with its own ids; results go back as ``tool`` messages. When a model answers a
  native request with text-form calls instead, those calls are parsed from the text (only for
  tools that exist, so a JSON answer is never mistaken for a call).
* ``XmlToolDispatcher``: tool specs are rendered into the system prompt, calls are parsed from
  the text (``parsing.parse_tool_calls``) and get generated ids, and results go to the model as
  one user message ``"[Tool results]\\n<tool_result name=\\"x\\" status=\\"ok\\">…"``.

The stored history is the same for both (assistant ``ToolUseBlock``s, ``tool`` result messages),
so a conversation can switch dispatch between turns. ``to_wire`` converts one stored message to
what the provider is sent; providers only ever see ``Message``s.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .messages import Block, Message, Role, TextBlock, ToolResultBlock, ToolUseBlock
from .parsing import detect_tool_call_parse_issue, map_tool_name_alias, parse_tool_calls
from .providers.base import Capabilities, ChatResponse
from .tools import ToolSpec

DISPATCH_MODES = ("auto", "native", "xml")

TOOL_PROTOCOL = (
    "## Tool Use Protocol\n\n"
    "To use a tool, wrap a JSON object in <tool_call></tool_call> tags:\n\n"
    "```\n<tool_call>\n{\"name\": \"tool_name\", \"arguments\": {\"param\": \"value\"}}\n"
    "</tool_call>\n```\n\n"
)
RESULTS_NOTE = (
    "You may use multiple tool calls in a single response. After tool execution, results appear "
    "in <tool_result> tags. Continue reasoning with the results until you can give a final answer."
)
TOOL_RESULTS_HEADER = "[Tool results]\n"
_CALL_MARKERS = ("<tool_call", "<toolcall", "<tool-call", "<function_call", "<invoke", "\"tool_calls\"")


@dataclass(slots=True)
class ParsedResponse:
    """A model response split into what it said and what it asked to run."""

    text: str
    calls: list[ToolUseBlock] = field(default_factory=list)
    from_text: bool = False  # the calls were parsed out of the text
    parse_issue: str | None = None
    # call id -> why its arguments were unusable (the call then carries ``{}``)
    argument_errors: dict[str, str] = field(default_factory=dict)


def schema_json(parameters: Any) -> str:
    return json.dumps(parameters, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def tools_section(specs: Sequence[ToolSpec]) -> str:
    """The tool list of the system prompt: ``- **name**: description`` plus its schema."""
    lines = ["## Tools\n\n"]
    for spec in specs:
        lines.append(f"- **{spec.name}**: {spec.description}\n  Parameters: `{schema_json(spec.parameters)}`\n")
    return "".join(lines)


def render_tool_call(call: ToolUseBlock) -> str:
    """A call as the history shows it in prompt-guided mode, with its id: a model that copies
    it from the history copies the id too, which is how a quote is told from a new call."""
    payload = json.dumps({"id": call.id, "name": call.name, "arguments": call.input},
                         ensure_ascii=False)
    return f"<tool_call>\n{payload}\n</tool_call>"


def format_tool_result(name: str, output: str, success: bool) -> str:
    status = "ok" if success else "error"
    return f"<tool_result name=\"{name}\" status=\"{status}\">\n{output}\n</tool_result>\n"


def _looks_like_call(text: str) -> bool:
    return any(marker in text for marker in _CALL_MARKERS)


def _argument_error(arguments: Any) -> str | None:
    if isinstance(arguments, dict):
        return None
    return f"The arguments must be a JSON object, not {type(arguments).__name__}."


def _resolve_name(name: str, known: frozenset[str]) -> str:
    """The offered tool a parsed name means. Text forms map names through ZeroClaw's alias
    table (``fetch`` -> ``http_request``); a team's own tool may be called by its alias."""
    if not known or name in known:
        return name
    matches = [tool for tool in known if map_tool_name_alias(tool) == name]
    return matches[0] if len(matches) == 1 else name


def _calls_from_text(text: str, new_id: Callable[[], str], known: frozenset[str] | None, *,
                     drop_unknown: bool = True) -> tuple[str, list[ToolUseBlock], dict[str, str]]:
    cleaned, parsed = parse_tool_calls(text)
    calls: list[ToolUseBlock] = []
    errors: dict[str, str] = {}
    for call in parsed:
        name = _resolve_name(call.name, known) if known is not None else call.name
        if drop_unknown and known is not None and name not in known:
            continue
        # The error stays on the call too, so a stored message says why it did not run.
        error = call.arguments_error or _argument_error(call.arguments)
        block = ToolUseBlock(id=call.id or new_id(), name=name,
                             input=call.arguments if isinstance(call.arguments, dict) else {},
                             arguments_error=error)
        if error:
            errors[block.id] = error
        calls.append(block)
    return cleaned, calls, errors


def _native_calls(text: str, uses: list[ToolUseBlock], new_id: Callable[[], str]
                  ) -> ParsedResponse:
    errors: dict[str, str] = {}
    for call in uses:
        if not call.id:
            call.id = new_id()
        # A provider that could not read the arguments says why in ``arguments_error``.
        error = call.arguments_error or _argument_error(call.input)
        if error:
            errors[call.id] = error
            call.input = {}  # keeps the stored history valid; the error goes to the model
    return ParsedResponse(text=text, calls=list(uses), argument_errors=errors)


class ToolDispatcher(abc.ABC):
    name: ClassVar[str] = ""
    sends_tool_specs: ClassVar[bool] = False

    def system_section(self, specs: Sequence[ToolSpec]) -> str:
        """Text the system prompt needs for tools; empty when specs travel in the request."""
        return ""

    @abc.abstractmethod
    def parse_response(self, response: ChatResponse, *, new_id: Callable[[], str],
                       known_tools: frozenset[str],
                       earlier: Mapping[str, ToolUseBlock] | None = None) -> ParsedResponse: ...

    def to_wire(self, message: Message) -> Message:
        return message

    def wire_messages(self, messages: Iterable[Message]) -> list[Message]:
        return [self.to_wire(m) for m in messages]


class NativeToolDispatcher(ToolDispatcher):
    name = "native"
    sends_tool_specs = True

    def parse_response(self, response: ChatResponse, *, new_id: Callable[[], str],
                       known_tools: frozenset[str],
                       earlier: Mapping[str, ToolUseBlock] | None = None) -> ParsedResponse:
        text = response.text
        native = response.message.tool_uses
        if native:
            return _native_calls(text, native, new_id)
        if not known_tools or not _looks_like_call(text):
            return ParsedResponse(text=text)
        cleaned, calls, _ = _calls_from_text(text, _unset_id, known_tools)
        calls, errors = _fresh_calls(calls, earlier or {}, new_id, said_more=bool(cleaned.strip()))
        if calls:
            return ParsedResponse(text=cleaned, calls=calls, from_text=True, argument_errors=errors)
        return ParsedResponse(text=text, parse_issue=detect_tool_call_parse_issue(text, []))


class XmlToolDispatcher(ToolDispatcher):
    name = "xml"
    sends_tool_specs = False

    @staticmethod
    def prompt_instructions() -> str:
        return TOOL_PROTOCOL

    def system_section(self, specs: Sequence[ToolSpec]) -> str:
        if not specs:
            return ""
        return f"{tools_section(specs)}\n{TOOL_PROTOCOL}{RESULTS_NOTE}"

    def parse_text(self, text: str, *, new_id: Callable[[], str] | None = None
                   ) -> tuple[str, list[ToolUseBlock]]:
        counter = iter(range(1, 1_000_000))
        make_id = new_id or (lambda: f"call_{next(counter)}")
        cleaned, calls, _ = _calls_from_text(text, make_id, None)
        return cleaned, calls

    def parse_response(self, response: ChatResponse, *, new_id: Callable[[], str],
                       known_tools: frozenset[str],
                       earlier: Mapping[str, ToolUseBlock] | None = None) -> ParsedResponse:
        """``earlier``: the calls already in the conversation, by id. A model quoting the
        conversation is never taken for one making calls: the calls before a ``<tool_result>``
        block it wrote itself (results only ever come from the platform), and a call carrying
        the id of an earlier one with the same name and arguments (the history shows calls
        with their ids), are quotes, not run. A bare copy with nothing else said is the model
        asking again: it runs, under a new id."""
        text = response.text
        native = response.message.tool_uses
        if native:  # a provider that returned structured calls anyway
            return _native_calls(text, native, new_id)
        head, text = _quoted_history(text)
        if head:
            head, _, _ = _calls_from_text(head, lambda: "quoted", known_tools, drop_unknown=False)
        # Prompt-guided: an unknown name stays a call, so the model is told "Unknown tool".
        cleaned, calls, _ = _calls_from_text(text, _unset_id, known_tools, drop_unknown=False)
        cleaned = head + cleaned
        calls, errors = _fresh_calls(calls, earlier or {}, new_id, said_more=bool(cleaned.strip()))
        return ParsedResponse(text=cleaned, calls=calls, from_text=bool(calls),
                              parse_issue=detect_tool_call_parse_issue(text, calls),
                              argument_errors=errors)

    @staticmethod
    def format_results(results: Iterable[ToolResultBlock]) -> str:
        body = "".join(format_tool_result(r.name, r.output, not r.is_error) for r in results)
        return TOOL_RESULTS_HEADER + body

    def to_wire(self, message: Message) -> Message:
        if message.role is Role.TOOL:
            return Message.user(self.format_results(message.tool_results_blocks))
        if message.role is Role.ASSISTANT:
            uses = message.tool_uses
            if uses:
                return self._assistant_text_form(message, uses)
        return message

    @staticmethod
    def _assistant_text_form(message: Message, uses: list[ToolUseBlock]) -> Message:
        """The answer's words, then its calls in the form the protocol shows, with their ids,
        whatever form the model (or a native provider) wrote them in; calls it only quoted
        are not shown again."""
        blocks: list[Block] = []
        for block in message.blocks:
            if isinstance(block, TextBlock) and _looks_like_call(block.text):
                block = TextBlock(parse_tool_calls(block.text)[0])
            if not isinstance(block, ToolUseBlock) and not (isinstance(block, TextBlock)
                                                              and not block.text):
                blocks.append(block)
        rendered = "\n".join(render_tool_call(u) for u in uses)
        blocks.append(TextBlock(f"\n{rendered}" if any(isinstance(b, TextBlock) for b in blocks)
                                else rendered))
        return Message(Role.ASSISTANT, blocks, message.usage)


_RESULT_END = "</tool_result>"


def _unset_id() -> str:
    return ""


def _fresh_calls(calls: list[ToolUseBlock], earlier: Mapping[str, ToolUseBlock],
                 new_id: Callable[[], str], *, said_more: bool
                 ) -> tuple[list[ToolUseBlock], dict[str, str]]:
    """The calls to make, each under an id of its own: quotes of earlier calls dropped (when
    the model said anything besides them), and an id the model wrote that is not new (or
    repeats within the answer) replaced, so two calls never share one."""
    quotes = [c for c in calls if _quotes(c, earlier)]
    if quotes and (said_more or len(quotes) < len(calls)):
        calls = [c for c in calls if c not in quotes]
    seen: set[str] = set()
    for call in calls:
        if not call.id or call.id in earlier or call.id in seen:
            call.id = new_id()
        seen.add(call.id)
    return calls, {c.id: c.arguments_error for c in calls if c.arguments_error}


def _quotes(call: ToolUseBlock, earlier: Mapping[str, ToolUseBlock]) -> bool:
    before = earlier.get(call.id) if call.id else None
    return before is not None and before.name == call.name and before.input == call.input


def _quoted_history(text: str) -> tuple[str, str]:
    """(the part of ``text`` up to the end of its last ``<tool_result>`` block, the rest):
    ("", text) when the model wrote no result block."""
    start = text.rfind("<tool_result")
    if start < 0:
        return "", text
    end = text.find(_RESULT_END, start)
    cut = len(text) if end < 0 else end + len(_RESULT_END)
    return text[:cut], text[cut:]


def select_dispatcher(mode: str, capabilities: Capabilities) -> ToolDispatcher:
    """``native`` or ``xml`` as configured; anything else (``auto``) by the provider's
    ``native_tool_calling`` capability."""
    if mode == "native":
        return NativeToolDispatcher()
    if mode == "xml":
        return XmlToolDispatcher()
    return NativeToolDispatcher() if capabilities.native_tool_calling else XmlToolDispatcher()


class VisibleTextFilter:
    """Streams only what a reader should see: drops ``<think>…</think>`` and (by default)
    ``<tool_call>…</tool_call>`` spans, holding back a possible partial tag between chunks."""

    def __init__(self, tags: Sequence[tuple[str, str]] = (("<think>", "</think>"),
                                                          ("<tool_call>", "</tool_call>"))) -> None:
        self._tags = tuple(tags)
        self._buffer = ""
        self._closing: str | None = None

    def feed(self, chunk: str) -> str:
        if not self._buffer and self._closing is None and "<" not in chunk:
            return chunk
        self._buffer += chunk
        out: list[str] = []
        while self._buffer:
            if self._closing is not None:
                end = self._buffer.find(self._closing)
                if end < 0:
                    self._buffer = self._buffer[-(len(self._closing) - 1):]
                    break
                self._buffer = self._buffer[end + len(self._closing):]
                self._closing = None
                continue
            start = self._buffer.find("<")
            if start < 0:
                out.append(self._buffer)
                self._buffer = ""
                break
            out.append(self._buffer[:start])
            rest = self._buffer[start:]
            state = self._match(rest)
            if state == "partial":
                self._buffer = rest
                break
            if state is None:
                out.append("<")
                self._buffer = rest[1:]
        return "".join(out)

    def _match(self, rest: str) -> str | None:
        for opening, closing in self._tags:
            if rest.startswith(opening):
                self._buffer = rest[len(opening):]
                self._closing = closing
                return "open"
            if opening.startswith(rest):
                return "partial"
        return None

    def flush(self) -> str:
        rest = "" if self._closing is not None else self._buffer
        self._buffer = ""
        return rest


__all__ = [
    "DISPATCH_MODES",
    "NativeToolDispatcher",
    "ParsedResponse",
    "ToolDispatcher",
    "VisibleTextFilter",
    "XmlToolDispatcher",
    "format_tool_result",
    "render_tool_call",
    "schema_json",
    "select_dispatcher",
    "tools_section",
]
