"""Markdown code fences (steps 4-5 of ``parse_tool_calls``): fences tagged ``tool_call`` or
``invoke`` hold JSON calls; a fence tagged ``tool <name>`` holds that tool's JSON arguments."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

from ._calls import _calls_from_json_value, _Parsed, map_tool_name_alias
from ._file_write_recovery import (
    _parse_malformed_file_write_arguments,
    _parse_malformed_file_write_call,
)
from ._json_values import extract_json_values
from ._text import _literal_seeker, _regex_seeker, _trim


class _FenceState(Protocol):
    """What the fences need of the tag loop's ``_ParseState``; a protocol, so this dialect
    does not import the state machine that calls it."""

    response: str
    text_parts: list[str]
    calls: list[_Parsed]
    malformed_fences: int

    def hits_rejected(self, start: int, end: int) -> bool: ...


_MD_TOOL_CALL_OPEN = re.compile(r"```(?:tool[_-]?call|invoke)\s*\n")
_MD_TOOL_CALL_CLOSE = re.compile(r"```|</tool[_-]?call>|</toolcall>|</invoke>|</minimax:toolcall>")
_MD_TOOL_NAME_OPEN = re.compile(r"```tool\s+(\w+)\s*\n")


def _fence_matches(state: _FenceState, opener: re.Pattern[str],
                   closer: Callable[[int], tuple[int, int] | None]
                   ) -> list[tuple[int, int, re.Match[str], str]]:
    """Non-overlapping ``opener … closer`` matches: ``(start, end, opener match, body)``."""
    text = state.response
    matches = []
    pos = 0
    while True:
        m = opener.search(text, pos)
        if m is None:
            return matches
        closing = closer(m.end())
        if closing is None:
            return matches  # no closer after this opener, so none after any later one either
        body_end, end = closing
        matches.append((m.start(), end, m, text[m.end():body_end]))
        pos = end


def _markdown_tool_call_fences(state: _FenceState) -> bool:
    text = state.response
    closer_seek, closer_found = _regex_seeker(text, _MD_TOOL_CALL_CLOSE)

    def closer(body_start: int) -> tuple[int, int] | None:
        at = closer_seek(body_start)
        return None if at < 0 else (at, at + len(closer_found[at]))

    parts: list[str] = []
    calls: list[_Parsed] = []
    last_end = 0
    for start, end, _m, inner in _fence_matches(state, _MD_TOOL_CALL_OPEN, closer):
        if state.hits_rejected(start, end):
            continue
        before = _trim(text[last_end:start])
        if before:
            parts.append(before)
        for value in extract_json_values(inner):
            calls.extend(_calls_from_json_value(value))
        if not calls:
            recovered = _parse_malformed_file_write_call(inner)
            if recovered is not None:
                calls.append(recovered)
        last_end = end
    return _adopt_fence_calls(state, parts, calls, last_end)


def _markdown_tool_name_fences(state: _FenceState) -> bool:
    text = state.response
    fence_seek = _literal_seeker(text, "```")

    def closer(body_start: int) -> tuple[int, int] | None:
        at = fence_seek(body_start)
        return (len(text), len(text)) if at < 0 else (at, at + 3)

    parts: list[str] = []
    calls: list[_Parsed] = []
    last_end = 0
    for start, end, m, inner in _fence_matches(state, _MD_TOOL_NAME_OPEN, closer):
        if state.hits_rejected(start, end):
            continue
        before = _trim(text[last_end:start])
        if before:
            parts.append(before)
        tool_name = m.group(1)
        values = extract_json_values(inner)
        if values:
            calls.extend(_Parsed(map_tool_name_alias(tool_name), v if isinstance(v, dict) else {})
                         for v in values)
        else:
            arguments = (_parse_malformed_file_write_arguments(inner)
                         if map_tool_name_alias(tool_name) == "file_write" else None)
            if arguments is not None:
                calls.append(_Parsed("file_write", arguments))
            else:
                state.malformed_fences += 1
        last_end = end
    return _adopt_fence_calls(state, parts, calls, last_end)


def _adopt_fence_calls(state: _FenceState, parts: list[str], calls: list[_Parsed],
                       last_end: int) -> bool:
    if not calls:
        return False
    after = _trim(state.response[last_end:])
    if after:
        parts.append(after)
    state.text_parts = parts
    state.calls.extend(calls)
    return True
