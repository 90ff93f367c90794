"""GLM shorthand: tag bodies like ``shell>ls``, ``tool(k="v")``, ``tool k="v" />`` or
``tool>`` with ``key: value`` lines, and whole lines like ``tool/param>value`` or ``tool/{json}``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._calls import ToolCall, _finish, _Parsed, default_param_for_tool, map_tool_name_alias
from ._json_values import _NO_VALUE, json_loads
from ._text import _RUST_WS_SET, RUST_WS, _is_alnum_or_underscore, _rust_lines, _trim


def _build_curl_command(url: str) -> str | None:
    if not (url.startswith("http://") or url.startswith("https://")):
        return None
    if any(c in _RUST_WS_SET for c in url):
        return None
    return "curl -s '{}'".format(url.replace("'", "'\"'\"'"))


def _shell_arguments(value: str) -> dict[str, Any]:
    if value.startswith("http://") or value.startswith("https://"):
        command = _build_curl_command(value)
        if command is not None:
            return {"command": command}
    return {"command": value}


def _trim_end_repeated(s: str, suffix: str) -> str:
    while suffix and s.endswith(suffix):
        s = s[: -len(suffix)]
    return s


def _first_ws_index(s: str) -> int:
    for i, c in enumerate(s):
        if c in _RUST_WS_SET:
            return i
    return len(s)


def _parse_attribute_pairs(value_part: str) -> dict[str, Any]:
    args: dict[str, Any] = {}
    rest = value_part
    while True:
        eq = rest.find('="')
        if eq < 0:
            break
        key_start = 0
        for i in range(eq - 1, -1, -1):
            if rest[i] in _RUST_WS_SET:
                key_start = i + 1
                break
        key = _trim(rest[key_start:eq]).strip(",;")
        after_quote = rest[eq + 2:]
        end_quote = after_quote.find('"')
        if end_quote < 0:
            break
        if key:
            args[key] = after_quote[:end_quote]
        rest = after_quote[end_quote + 1:]
    return args


def _parse_yaml_pairs(value_part: str) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for raw_line in _rust_lines(value_part):
        line = _trim(raw_line)
        colon = line.find(":")
        if colon < 0:
            continue
        key = _trim(line[:colon])
        value = _trim(line[colon + 1:])
        if key and value:
            args[key] = {"true": True, "yes": True, "false": False, "no": False}.get(value, value)
    return args


def _split_glm_body(body: str) -> tuple[str, str] | None:
    open_paren = body.find("(")
    if open_paren > 0 and body.endswith(")"):
        return _trim(body[:open_paren]), _trim(body[open_paren + 1:-1])
    if '="' in body:
        split = _first_ws_index(body)
        attrs = _trim(body[split:])
        attrs = _trim(_trim_end_repeated(_trim_end_repeated(_trim_end_repeated(attrs, "/>"), ">"),
                                         "/"))
        return _trim(body[:split]), attrs
    gt = body.find(">")
    if gt < 0:
        return None
    value = _trim(body[gt + 1:])
    value = _trim(_trim_end_repeated(_trim_end_repeated(value, "/>"), "/"))
    return _trim(body[:gt]), value


def _parse_glm_shortened(body: str) -> _Parsed | None:
    body = _trim(body)
    if not body:
        return None
    split = _split_glm_body(body)
    if split is None:
        return None
    tool_raw, value_part = split
    tool_raw = tool_raw.rstrip(RUST_WS)
    if not tool_raw or not _is_alnum_or_underscore(tool_raw):
        return None
    tool_name = map_tool_name_alias(tool_raw)
    if '="' in value_part:
        args = _parse_attribute_pairs(value_part)
        if args:
            return _Parsed(tool_name, args)
    if "\n" in value_part:
        args = _parse_yaml_pairs(value_part)
        if args:
            return _Parsed(tool_name, args)
    if not value_part:
        return None
    if tool_name == "shell":
        return _Parsed(tool_name, _shell_arguments(value_part))
    if tool_name == "http_request":
        return _Parsed(tool_name, {"url": value_part, "method": "GET"})
    return _Parsed(tool_name, {default_param_for_tool(tool_raw): value_part})


def parse_glm_shortened_body(body: str) -> ToolCall | None:
    """A tag body in GLM shorthand: ``tool(k="v")``, ``tool k="v" />``, ``tool>value`` or
    ``tool>`` followed by ``key: value`` lines."""
    parsed = _parse_glm_shortened(body)
    return _finish(parsed) if parsed is not None else None


def _parse_glm_lines(text: str) -> list[tuple[str, Any, str]]:
    calls = []
    for raw_line in _rust_lines(text):
        line = _trim(raw_line)
        slash = line.find("/")
        if slash <= 0:  # no slash, or nothing before it (not a tool name)
            continue
        tool_part = line[:slash]
        rest = line[slash + 1:]
        if not _is_alnum_or_underscore(tool_part):
            continue
        tool_name = map_tool_name_alias(tool_part)
        gt = rest.find(">")
        if gt >= 0:
            param = _trim(rest[:gt])
            value = _trim(rest[gt + 1:])
            if tool_name == "shell":
                if param == "url":
                    command = _build_curl_command(value)
                    if command is None:
                        continue
                    arguments: Any = {"command": command}
                else:
                    arguments = _shell_arguments(value)
            elif tool_name == "http_request":
                arguments = {"url": value, "method": "GET"}
            else:
                arguments = {param: value}
            calls.append((tool_name, arguments, line))
            continue
        if rest.startswith("{"):
            value = json_loads(rest)
            if value is not _NO_VALUE:
                calls.append((tool_name, value, line))
    return calls


def parse_glm_style_tool_calls(text: str) -> list[tuple[str, dict[str, Any], str]]:
    """GLM line calls ``tool/param>value`` and ``tool/{json}``: ``(name, arguments, raw line)``."""
    return [(name, _finish(_Parsed(name, args)).arguments, raw)
            for name, args, raw in _parse_glm_lines(text)]


def _remove_raw_lines(text: str, raws: Sequence[str]) -> str:
    """``text`` with every occurrence of each raw call line removed, in order (``replace``)."""
    distinct = list(dict.fromkeys(raws))
    if len(distinct) <= 32:
        for raw in distinct:
            text = text.replace(raw, "")
        return text
    # Many distinct lines (hostile input): a raw line holds no newline, so it can only occur
    # within one line; remove it where it stands as its own line.
    wanted = set(distinct)
    return "\n".join(line.replace(_trim(line), "") if _trim(line) in wanted else line
                     for line in text.split("\n"))
