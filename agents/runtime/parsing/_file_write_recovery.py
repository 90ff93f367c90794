"""Recovery of a ``file_write`` call whose ``content`` holds unescaped quotes (spec §17.15, ZH).

Models writing code often forget to escape the quotes in it, which makes the whole call invalid
JSON; the content is recovered when where it ends is unambiguous.
"""

from __future__ import annotations

from typing import Any

from ._calls import _Parsed, map_tool_name_alias
from ._json_values import _STRING_AT, _JsonScanner, json_loads
from ._text import _ascii_lower, _skip_ws, _trim

_CLOSE_TAG_PREFIXES = ("</tool_call>", "</tool_calls>", "</tools>", "</toolcall>", "</tool-call>",
                       "</invoke>", "</minimax:tool_call>", "</minimax:toolcall>", "```")


def _find_json_field_value_start(s: str, field_name: str, start: int) -> int:
    pattern = f'"{field_name}"'
    search = start
    while True:
        key = s.find(pattern, search)
        if key < 0:
            return -1
        after_key = key + len(pattern)
        colon = _skip_ws(s, after_key)
        if s.startswith(":", colon):
            return colon + 1
        search = after_key


def _find_json_string_end(s: str, quote: int) -> int:
    m = _STRING_AT.match(s, quote)
    return m.end() - 1 if m else -1


def _parse_json_string_field_after(s: str, field_name: str, start: int) -> tuple[str, int] | None:
    value_start = _find_json_field_value_start(s, field_name, start)
    if value_start < 0:
        return None
    value_start = _skip_ws(s, value_start)
    value_end = _find_json_string_end(s, value_start)
    if value_end < 0:
        return None
    value = json_loads(s[value_start:value_end + 1])
    if not isinstance(value, str):
        return None
    return value, value_end + 1


_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                   "t": "\t"}


def _decode_recovered_fragment(raw: str) -> str:
    out = []
    i = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:
            out.append("\\")
            break
        esc = raw[i]
        i += 1
        if esc in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[esc])
        elif esc == "u":
            digits = raw[i:i + 4]
            i += len(digits)
            if len(digits) == 4 and all(d in "0123456789abcdefABCDEF" for d in digits):
                code = int(digits, 16)
                # A lone surrogate is not a char in Rust: keep the escape as written.
                out.append(chr(code) if not 0xD800 <= code <= 0xDFFF else "\\u" + digits)
            else:
                out.append("\\u" + digits)
        else:
            out.append("\\" + esc)
    return "".join(out)


def _content_tail_is_unambiguous(s: str, after_quote: int) -> bool:
    i = _skip_ws(s, after_quote)
    if not s.startswith("}", i):
        return False
    i = _skip_ws(s, i + 1)
    n = len(s)
    while i < n and s[i] in "}]":
        i = _skip_ws(s, i + 1)
    return i >= n or any(s.startswith(prefix, i) for prefix in _CLOSE_TAG_PREFIXES)


def _quote_starts_additional_final_field(s: str, after_quote: int) -> bool:
    i = _skip_ws(s, after_quote)
    if not s.startswith(",", i):
        return False
    i = _skip_ws(s, i + 1)
    field_end = _find_json_string_end(s, i)
    if field_end < 0:
        return False
    i = _skip_ws(s, field_end + 1)
    if not s.startswith(":", i):
        return False
    i = _skip_ws(s, i + 1)
    found = _JsonScanner(s).stream_value_at(i)
    return found is not None and found[1] > i and _content_tail_is_unambiguous(s, found[1])


def _parse_malformed_content_after(s: str, start: int) -> str | None:
    value_start = _find_json_field_value_start(s, "content", start)
    if value_start < 0:
        return None
    value_start = _skip_ws(s, value_start)
    if not s.startswith('"', value_start):
        return None
    i = value_start + 1
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            if _content_tail_is_unambiguous(s, i + 1):
                return _decode_recovered_fragment(s[value_start + 1:i])
            if _quote_starts_additional_final_field(s, i + 1):
                return None
        i += 1
    return None


def _parse_malformed_file_write_arguments(text: str) -> dict[str, Any] | None:
    trimmed = _trim(text)
    if not trimmed.startswith("{"):
        return None
    found = _parse_json_string_field_after(trimmed, "path", 0)
    if found is None:
        return None
    path, path_end = found
    if not _trim(path):
        return None
    content = _parse_malformed_content_after(trimmed, path_end)
    if content is None:
        return None
    return {"path": path, "content": content}


def _json_fence_body(trimmed: str) -> str | None:
    if not trimmed.startswith("```"):
        return None
    rest = trimmed[3:]
    newline = rest.find("\n")
    if newline < 0:
        return None
    language = _trim(rest[:newline]).rstrip("\r")
    if _ascii_lower(language) != "json":
        return None
    body_with_close = rest[newline + 1:]
    close = body_with_close.rfind("```")
    if close < 0 or _trim(body_with_close[close + 3:]):
        return None
    return _trim(body_with_close[:close])


def _parse_malformed_file_write_call(text: str) -> _Parsed | None:
    trimmed = _trim(text)
    fenced = _json_fence_body(trimmed)
    body = _trim(fenced if fenced is not None else trimmed)
    if not body or body[0] not in "{[":
        return None
    found = _parse_json_string_field_after(body, "name", 0)
    if found is None:
        return None
    name, name_end = found
    if map_tool_name_alias(_trim(name)) != "file_write":
        return None
    arguments_start = _find_json_field_value_start(body, "arguments", name_end)
    if arguments_start < 0:
        arguments_start = _find_json_field_value_start(body, "parameters", name_end)
    if arguments_start < 0:
        return None
    arguments = _parse_malformed_file_write_arguments(body[arguments_start:])
    if arguments is None:
        return None
    return _Parsed("file_write", arguments)
