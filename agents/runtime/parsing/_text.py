"""Text primitives with Rust semantics, and the memoised searches every dialect shares.

ZeroClaw is Rust: its ``trim``, ``lines`` and whitespace differ from Python's in corner cases
the conformance vectors pin, so every module here uses these instead of the ``str`` methods.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# char::is_whitespace (Unicode White_Space). Python's str.strip() also strips \x1c-\x1f.
RUST_WS = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
           "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_RUST_WS_SET = frozenset(RUST_WS)
JSON_WS = " \t\n\r"
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _trim(s: str) -> str:
    return s.strip(RUST_WS)


def _ascii_lower(s: str) -> str:
    """Lowercase ASCII letters only, so indices stay valid (``str.lower`` can change length)."""
    return s.translate(_ASCII_LOWER)


def _rust_lines(s: str) -> list[str]:
    """``str::lines``: split on ``\\n``, drop one ``\\r`` before it, no empty last line."""
    if not s:
        return []
    parts = s.split("\n")
    ends_with_newline = s.endswith("\n")
    if ends_with_newline:
        parts.pop()
    last = len(parts) - 1
    return [p[:-1] if (i < last or ends_with_newline) and p.endswith("\r") else p
            for i, p in enumerate(parts)]


def _is_alnum_or_underscore(s: str) -> bool:
    return all(c == "_" or c.isalnum() for c in s)


class _Seeker:
    """Memoised ``find`` for queries that mostly move forward: a miss (or a hit) stays valid for
    later queries up to the hit, so scanning a text for many tags stays linear."""

    __slots__ = ("_find", "_query", "_result")

    def __init__(self, find: Callable[[int], int]) -> None:
        self._find = find
        self._query = -1
        self._result = -1

    def __call__(self, pos: int) -> int:
        if self._query >= 0 and pos >= self._query and (self._result < 0 or pos <= self._result):
            return self._result
        self._query = pos
        self._result = self._find(pos)
        return self._result


def _literal_seeker(haystack: str, needle: str) -> _Seeker:
    return _Seeker(lambda pos: haystack.find(needle, pos))


def _regex_seeker(haystack: str, pattern: re.Pattern[str]) -> tuple[_Seeker, dict[int, str]]:
    """Seeker for the earliest match of ``pattern``; the dict maps a hit to the matched text."""
    found: dict[int, str] = {}

    def find(pos: int) -> int:
        m = pattern.search(haystack, pos)
        if m is None:
            return -1
        found[m.start()] = m.group()
        return m.start()

    return _Seeker(find), found


def _skip_ws(s: str, i: int) -> int:
    n = len(s)
    while i < n and s[i] in _RUST_WS_SET:
        i += 1
    return i


def _remove_blocks(text: str, open_marker: str, close_marker: str, *, close_from: int | None = None,
                   limit: int | None = None) -> str:
    """Remove ``open … close`` blocks left to right, the close searched from ``close_from``
    characters after the open (default: after the whole open marker)."""
    out = []
    pos = 0
    offset = len(open_marker) if close_from is None else close_from
    removed = 0
    while limit is None or removed < limit:
        start = text.find(open_marker, pos)
        if start < 0:
            break
        end = text.find(close_marker, max(start + offset, 0))
        if end < 0:
            break
        out.append(text[pos:start])
        pos = end + len(close_marker)
        removed += 1
    out.append(text[pos:])
    return "".join(out)
