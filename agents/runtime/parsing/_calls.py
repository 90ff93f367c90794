"""What a parsed call is (``ToolCall``), the tool-name aliases models use, and the JSON call
shapes (``{"name", "arguments"}``, ``{"function": …}``, ``{"tool_calls": […]}``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ._json_values import _NO_VALUE, MISSING, _json_dumps, _json_object_get, json_loads
from ._text import _trim


@dataclass(slots=True)
class ToolCall:
    """One call parsed from model text. ``id`` is the model's own call id when it gave one."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    # A plain sentence when the model's arguments were present but not a JSON object.
    arguments_error: str | None = None


class _Parsed(NamedTuple):
    """A call as ZeroClaw holds it: ``arguments`` is any JSON value."""

    name: str
    arguments: Any
    tool_call_id: str | None = None
    error: str | None = None


_ALIASES = {
    **dict.fromkeys(("shell", "bash", "sh", "exec", "command", "cmd", "browser_open", "browser",
                     "web_search"), "shell"),
    **dict.fromkeys(("send_message", "sendmessage"), "message_send"),
    **dict.fromkeys(("fileread", "file_read", "readfile", "read_file", "file"), "file_read"),
    **dict.fromkeys(("filewrite", "file_write", "writefile", "write_file"), "file_write"),
    **dict.fromkeys(("filelist", "file_list", "listfiles", "list_files"), "file_list"),
    **dict.fromkeys(("memoryrecall", "memory_recall", "recall", "memrecall"), "memory_recall"),
    **dict.fromkeys(("memorystore", "memory_store", "store", "memstore"), "memory_store"),
    **dict.fromkeys(("memoryforget", "memory_forget", "forget", "memforget"), "memory_forget"),
    **dict.fromkeys(("http_request", "http", "fetch", "curl", "wget"), "http_request"),
}

_DEFAULT_PARAMS = {
    **dict.fromkeys(("shell", "bash", "sh", "exec", "command", "cmd"), "command"),
    **dict.fromkeys(("file_read", "fileread", "readfile", "read_file", "file", "file_write",
                     "filewrite", "writefile", "write_file", "file_edit", "fileedit", "editfile",
                     "edit_file", "file_list", "filelist", "listfiles", "list_files"), "path"),
    **dict.fromkeys(("memory_recall", "memoryrecall", "recall", "memrecall", "memory_forget",
                     "memoryforget", "forget", "memforget", "web_search_tool", "web_search",
                     "websearch", "search"), "query"),
    **dict.fromkeys(("memory_store", "memorystore", "store", "memstore"), "content"),
    **dict.fromkeys(("http_request", "http", "fetch", "curl", "wget", "browser_open", "browser"),
                    "url"),
}


def map_tool_name_alias(name: str) -> str:
    """The canonical tool name for the spellings models use in XML and shorthand calls."""
    return _ALIASES.get(name, name)


def default_param_for_tool(name: str) -> str:
    """The parameter a single shorthand value (``tool>value``) fills, by the raw tool name."""
    return _DEFAULT_PARAMS.get(name, "input")


def parse_arguments_value(raw: Any = MISSING) -> Any:
    """ZeroClaw's ``parse_arguments_value``: a JSON string is decoded (``{}`` when it is not
    JSON), any other value is kept (``None`` for JSON null), an absent value is ``{}``."""
    if raw is MISSING:
        return {}
    if isinstance(raw, str):
        value = json_loads(raw)
        return {} if value is _NO_VALUE else value
    return raw


def _first_present(value: Any, *keys: str) -> Any:
    for key in keys:
        found = _json_object_get(value, key)
        if found is not MISSING:
            return found
    return MISSING


def _parse_tool_call_id(root: Any, function: Any) -> str | None:
    # The first key present wins, then it must be a non-empty string.
    raw = MISSING
    if function is not MISSING:
        raw = _json_object_get(function, "id")
    if raw is MISSING:
        raw = _first_present(root, "id", "tool_call_id", "call_id")
    if isinstance(raw, str) and _trim(raw):
        return _trim(raw)
    return None


def _name_of(value: Any) -> str:
    name = _json_object_get(value, "name")
    return _trim(name) if isinstance(name, str) else ""


def _arguments_of(holder: Any) -> tuple[Any, str | None]:
    """``parse_arguments_value`` of ``arguments``/``parameters``, plus a note when a string was
    not JSON (an empty string is a call without arguments)."""
    raw = _first_present(holder, "arguments", "parameters")
    if isinstance(raw, str) and _trim(raw):
        value = json_loads(raw)
        if value is _NO_VALUE:
            return {}, f"The arguments were not valid JSON: {raw[:200]}"
        return value, None
    if isinstance(raw, str):
        return {}, None
    return parse_arguments_value(raw), None


def _parse_call_value(value: Any) -> _Parsed | None:
    function = _json_object_get(value, "function")
    if function is not MISSING:
        name = _name_of(function)
        if name:
            arguments, error = _arguments_of(function)
            return _Parsed(name, arguments, _parse_tool_call_id(value, function), error)
    name = _name_of(value)
    if not name:
        return None
    arguments, error = _arguments_of(value)
    return _Parsed(name, arguments, _parse_tool_call_id(value, MISSING), error)


def _calls_from_json_value(value: Any) -> list[_Parsed]:
    calls: list[_Parsed] = []
    tool_calls = _json_object_get(value, "tool_calls")
    if isinstance(tool_calls, list):
        calls = [c for c in map(_parse_call_value, tool_calls) if c is not None]
        if calls:
            return calls
    if isinstance(value, list):
        return [c for c in map(_parse_call_value, value) if c is not None]
    parsed = _parse_call_value(value)
    return [parsed] if parsed is not None else []


def _finish(call: _Parsed) -> ToolCall:
    arguments = call.arguments
    if isinstance(arguments, dict):
        return ToolCall(call.name, arguments, call.tool_call_id, call.error)
    if arguments is None:
        return ToolCall(call.name, {}, call.tool_call_id)
    kind = "a list" if isinstance(arguments, list) else f"the value {_json_dumps(arguments)[:80]}"
    error = f"The arguments must be a JSON object, not {kind}."
    return ToolCall(call.name, {}, call.tool_call_id, error)


def parse_tool_call_value(value: Any) -> ToolCall | None:
    """One call from ``{"function": {"name", "arguments"|"parameters"}}`` or
    ``{"name", "arguments"|"parameters"}``; the id is ``function.id``/``id``/``tool_call_id``/
    ``call_id``."""
    parsed = _parse_call_value(value)
    return _finish(parsed) if parsed is not None else None


def parse_tool_calls_from_json_value(value: Any) -> list[ToolCall]:
    """Calls from a ``tool_calls`` array, a top-level array, or a single call object."""
    return [_finish(c) for c in _calls_from_json_value(value)]
