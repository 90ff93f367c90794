"""JSON with serde_json semantics, and the scanner that finds JSON values inside text.

serde_json refuses ``NaN``/``Infinity``, numbers out of range, lone surrogates and nesting deeper
than 127 levels, where Python's ``json`` accepts some of them; ``json_loads`` and ``_JsonScanner``
give serde's answers. The scanner stays linear on hostile input (see its docstring).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from ._text import JSON_WS, _trim

# An absent key or argument, as opposed to JSON ``null`` (which is ``None``).
MISSING: Any = object()

MAX_JSON_DEPTH = 127  # serde_json's recursion limit of 128 refuses the 128th nested container


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError("number out of range")
    return value


def _json_int(text: str) -> int | float:
    # serde_json falls back to f64 for integers too big for 64 bits; Python would otherwise
    # refuse literals of more than 4300 digits.
    if len(text) > 300:
        return _finite_float(text)
    return int(text)


_JSON_STARTS = frozenset('{["-0123456789tfn')
_NON_JSON_WS = re.compile(r"[^ \t\n\r]")
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float,
                            parse_int=_json_int)
_NO_VALUE: Any = object()


def _depth_ok(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            return False
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return True


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _serde_accepts(value: Any, source: str) -> bool:
    """Nesting within serde_json's limit, and no lone surrogate from a ``\\uD800``-style escape
    (serde_json refuses those; in Python they would fail later, when the text is encoded)."""
    if not _depth_ok(value):
        return False
    if "\\u" in source and _SURROGATE_ESCAPE.search(source):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


def json_loads(text: str) -> Any:
    """``serde_json::from_str``: one value, surrounded only by JSON whitespace; ``_NO_VALUE``
    when it is not exactly that."""
    first = _NON_JSON_WS.search(text)
    if first is None or first.group() not in _JSON_STARTS:
        return _NO_VALUE  # cheap refusal of prose, before an exception is built
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError):
        return _NO_VALUE
    return value if _serde_accepts(value, text) else _NO_VALUE


_CONTAINER_TOKEN = re.compile(r'(?s)[\[{]+|[\]}]|"[^"\\]*+(?:\\.[^"\\]*+)*+"|"')
_BRACE_TOKEN = re.compile(r'(?s)\{+|\}|"[^"\\]*+(?:\\.[^"\\]*+)*+"|"')
_OPEN_BRACKET = re.compile(r"[\[{]")
_OPENER_RUN = re.compile(r"[\[{]++")
# What may follow an opening bracket in JSON: refusing "[see above]" or "{x}" here is much
# cheaper than building a decode error.
_VALUE_OPENING = re.compile(r'\{[ \t\n\r]*+["}]|\[[ \t\n\r]*+[\[\]{"\-0-9tfn]')
_DECODE_WINDOWS = (512, 16384)
_TOO_DEEP: Any = object()
_END_OF_VALUE = frozenset(' \n\t\r"[]{},:')
_STRING_AT = re.compile(r'(?s)"[^"\\]*+(?:\\.[^"\\]*+)*+"')
_JSON_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?|true|false|null")


class _JsonScanner:
    """Finds the JSON value that serde_json's stream deserializer reads at a position of one text.

    A value is first decoded from a small window at C speed; that settles almost every position.
    When a window cannot tell (the value runs past it, or nests too deep for Python's decoder),
    one string-aware bracket scan finds where the container ends and how deep it nests. The scan
    memoises every container it passes and marks all containers still open at the end of the
    text as failed, so asking about every bracket of a text stays linear even for megabytes of
    ``{"a":{"a":…`` or ``[[[[…``.
    """

    __slots__ = ("_bend", "_bfail", "_end", "_expensive", "_fail", "_gfail", "_height", "_run",
                 "_sid", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._end: dict[int, int] = {}
        self._height: dict[int, int] = {}
        self._fail: set[int] = set()
        self._sid: dict[int, int] = {}
        self._gfail: list[tuple[int, int, int]] = []
        self._bend: dict[int, int] = {}
        self._bfail: set[int] = set()
        self._run = (0, 0)
        self._expensive = 0

    # -- bracket structure ---------------------------------------------------------------------
    def _container_end(self, q: int) -> int:
        """End (exclusive) of the container opening at ``q``, or -1 when it never closes."""
        end = self._end.get(q)
        if end is not None:
            return end
        if q in self._fail:
            return -1
        text, ends, heights, fail, sid = self.text, self._end, self._height, self._fail, self._sid
        stack = [q]
        levels = [1]
        sid[q] = q
        pos = q + 1
        search = _CONTAINER_TOKEN.search
        while True:
            m = search(text, pos)
            if m is None:
                break
            i, j = m.span()
            c = text[i]
            if c == '"':
                if j - i == 1:  # unterminated string
                    break
                pos = j
                continue
            if c == "[" or c == "{":
                stop = self._first_known(i, j)
                stack.extend(range(i, stop))
                levels.extend([1] * (stop - i))
                if stop - i == 1:
                    sid[i] = q
                elif stop > i:
                    sid.update(dict.fromkeys(range(i, stop), q))
                if stop == j:
                    pos = j
                    continue
                if stop in fail:
                    break
                child = heights[stop] + 1
                if levels[-1] < child:
                    levels[-1] = child
                pos = ends[stop]
                continue
            top = stack[-1]
            if (c == "}") != (text[top] == "{"):
                break
            stack.pop()
            height = levels.pop()
            ends[top] = j
            heights[top] = height
            if not stack:
                return j
            if levels[-1] <= height:
                levels[-1] = height + 1
            pos = j
        fail.update(stack)
        return -1

    def _first_known(self, i: int, j: int) -> int:
        """The first position in the opener run ``[i, j)`` already scanned, else ``j``."""
        ends, fail = self._end, self._fail
        if j - i == 1:
            return i if i in ends or i in fail else j
        run = range(i, j)
        hits = (ends.keys() & run) | fail.intersection(run)
        return min(hits) if hits else j

    def brace_end(self, q: int) -> int:
        """ZeroClaw's ``find_json_end`` from a ``{`` at ``q``: braces only, strings respected."""
        end = self._bend.get(q)
        if end is not None:
            return end
        if q in self._bfail:
            return -1
        text, ends, fail = self.text, self._bend, self._bfail
        stack = [q]
        pos = q + 1
        search = _BRACE_TOKEN.search
        while True:
            m = search(text, pos)
            if m is None:
                break
            i, j = m.span()
            c = text[i]
            if c == '"':
                if j - i == 1:
                    break
                pos = j
                continue
            if c == "{":
                if j - i == 1:
                    stop = i if i in ends or i in fail else j
                else:
                    run = range(i, j)
                    hits = (ends.keys() & run) | fail.intersection(run)
                    stop = min(hits) if hits else j
                stack.extend(range(i, stop))
                if stop == j:
                    pos = j
                    continue
                if stop in fail:
                    break
                pos = ends[stop]
                continue
            ends[stack.pop()] = j
            if not stack:
                return j
            pos = j
        fail.update(stack)
        return -1

    # -- values ---------------------------------------------------------------------------------
    def _known_to_fail(self, q: int, end: int) -> bool:
        # A decode from ``start`` that failed at ``err`` also fails from any container of the
        # same scan that opens inside it and is still open at ``err``.
        for start, err, scan in self._gfail[-4:]:
            if start < q < err < end and self._sid.get(q) == scan:
                return True
        return False

    def _too_deep_run(self, q: int) -> bool:
        """True when ``q`` starts 128 or more consecutive openers: nested that deep, serde_json
        refuses the value whatever follows."""
        run_start, run_end = self._run
        if not run_start <= q < run_end:
            m = _OPENER_RUN.match(self.text, q)
            run_start, run_end = (q, m.end()) if m else (q, q)
            self._run = (run_start, run_end)
        return run_end - q > MAX_JSON_DEPTH

    def _decode_window(self, q: int, stop_at: int) -> Any:
        """Decode at ``q`` from ``text[q:stop_at]``: ``(value, end)``, None when there is no
        value, ``MISSING`` when the window was too small to tell."""
        window = self.text[q:stop_at]
        truncated = stop_at < len(self.text)
        try:
            value, stop = _DECODER.raw_decode(window)
        except json.JSONDecodeError as exc:
            if truncated and (exc.pos >= len(window) - 16 or exc.msg.startswith("Unterminated")):
                return MISSING
            return None
        except RecursionError:
            return _TOO_DEEP
        except ValueError:
            return None
        return (value, q + stop) if _serde_accepts(value, window[:stop]) else None

    def _decode_exact(self, q: int) -> tuple[Any, int] | None:
        end = self._container_end(q)
        if end < 0 or self._height[q] > MAX_JSON_DEPTH or self._known_to_fail(q, end):
            return None
        # Decode the slice, not the whole text: a JSONDecodeError counts the lines before its
        # position, which over a large text would make every failure cost the text's length.
        source = self.text[q:end]
        try:
            value, stop = _DECODER.raw_decode(source)
        except json.JSONDecodeError as exc:
            self._gfail.append((q, q + exc.pos, self._sid.get(q, -1)))
            return None
        except (ValueError, RecursionError):
            return None
        return (value, q + stop) if _serde_accepts(value, source) else None

    def value_at(self, q: int) -> tuple[Any, int] | None:
        """The value whose ``{``/``[`` is at ``q`` and where it ends, or None."""
        if q in self._fail or not _VALUE_OPENING.match(self.text, q) or self._too_deep_run(q):
            return None
        if q in self._end:
            return self._decode_exact(q)
        n = len(self.text)
        found = MISSING
        for size in _DECODE_WINDOWS:
            found = self._decode_window(q, min(n, q + size))
            if found is not MISSING or q + size >= n:
                break
        if found is not MISSING and found is not _TOO_DEEP:
            return found
        # Undecided by the windows. The first few such positions are settled by decoding to the
        # end of the text (nested too deep: no value); after that the bracket scan pays off,
        # because its memo answers every position inside the same structure at once.
        if self._expensive < 4:
            self._expensive += 1
            if found is not _TOO_DEEP:
                found = self._decode_window(q, n)
            return None if found is _TOO_DEEP or found is MISSING else found
        return self._decode_exact(q)

    def stream_value_at(self, i: int) -> tuple[Any, int] | None:
        """``Deserializer::from_str(&text[i..]).into_iter().next()`` when it is ``Some(Ok)``."""
        text = self.text
        n = len(text)
        while i < n and text[i] in JSON_WS:
            i += 1
        if i >= n:
            return None
        c = text[i]
        if c in "[{":
            return self.value_at(i)
        m = (_STRING_AT if c == '"' else _JSON_SCALAR).match(text, i)
        if m is None:
            return None
        stop = m.end()
        if c != '"' and stop < n and text[stop] not in _END_OF_VALUE:
            return None
        value = json_loads(m.group())
        return None if value is _NO_VALUE else (value, stop)

    def first_value_from(self, start: int) -> tuple[Any, int] | None:
        """The first ``{``/``[`` at or after ``start`` that begins a valid value."""
        text = self.text
        pos = start
        while True:
            m = _OPEN_BRACKET.search(text, pos)
            if m is None:
                return None
            q = m.start()
            found = self.value_at(q)
            if found is not None:
                return found
            pos = q + 1

    def values_from(self, start: int) -> list[Any]:
        """Every value found scanning from ``start``, resuming after each one."""
        values = []
        text = self.text
        pos = start
        while True:
            m = _OPEN_BRACKET.search(text, pos)
            if m is None:
                return values
            q = m.start()
            found = self.value_at(q)
            if found is None:
                pos = q + 1
            else:
                values.append(found[0])
                pos = found[1]


def extract_json_values(text: str) -> list[Any]:
    """Every JSON value in ``text``: the whole (trimmed) text when it is JSON, else each
    ``{…}``/``[…]`` a streaming parse accepts, left to right."""
    trimmed = _trim(text)
    if not trimmed:
        return []
    whole = json_loads(trimmed)
    if whole is not _NO_VALUE:
        return [whole]
    return _JsonScanner(trimmed).values_from(0)


def _json_object_get(value: Any, key: str) -> Any:
    """serde's ``value.get(key)``: present only on objects; ``MISSING`` otherwise."""
    if isinstance(value, dict) and key in value:
        return value[key]
    return MISSING


def _json_dumps(value: Any) -> str:
    """``serde_json::to_string`` of a value: compact, keys sorted, UTF-8 kept."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
