"""Tool calls read from model text (ZeroClaw's ``parse_tool_calls``, runtime spec §2 and §17.15).

``parse_tool_calls(text)`` returns the text a user should see and the calls the model asked for.
It understands every format models are seen to emit when they are not using native tool calling:
OpenAI-style JSON, ``<tool_call>`` blocks (and the ``<toolcall>``, ``<tool-call>``,
``<tool_calls>``, ``<invoke>``, ``<minimax:tool_call>`` aliases, with mixed-up close tags or
none), ``<tools>`` wrappers around one invocation (a Hermes tool *declaration* is never run),
MiniMax ``<invoke name=..><parameter ..>`` markup, XML bodies, GLM shorthand (``shell>ls``,
``tool(k="v")``, ``tool k="v" />``, ``tool/param>value`` lines), ``tool_call`` / ``tool <name>``
code fences, Perl-style ``TOOL_CALL`` blocks and ``<FunctionCall>`` blocks.

Bare JSON inside prose is never a call: a model quoting an example must not run it.

The ZH additions of spec §17.15 are included (``<tools>`` / ``<tool_calls>`` wrappers with the
Hermes declaration guard, recovery of a ``file_write`` whose content has unescaped quotes); the
conformance test of ``parse_tool_calls_head.json`` records why for each vector.

Contracts:

* ``parse_tool_calls`` and the helpers here never raise. Python's ``re`` backtracks where Rust's
  ``regex`` does not, so every pattern that could go quadratic on hostile input is matched by
  hand with memoised ``find``\\s, and JSON values embedded in text are located by one memoised
  bracket scan (``_JsonScanner``) before ``json`` decodes them.
* JSON follows serde_json: no ``NaN``/``Infinity``, numbers must be finite, nesting deeper than
  127 levels is rejected.
* ``ToolCall.arguments`` is always a dict. Arguments that are JSON ``null`` or absent become
  ``{}``; arguments that are not an object (a list, a number, a string that is not JSON) also
  become ``{}`` and ``ToolCall.arguments_error`` says why, so the loop can tell the model instead
  of running the tool with nothing. ``parse_arguments_value`` itself keeps ZeroClaw's raw result
  (``null`` stays ``None``).

Deliberate differences from the original (none is covered by a vector):

* Names in JSON calls are used as written (ZeroClaw's later parser maps aliases there too, so
  ``web_search`` would become ``shell``; our tools are user-defined, so that would misroute).
* A GLM line with nothing before its ``/`` (``/usr/bin>x``) is not a call with an empty name.
* Text clean-up after ``<FunctionCall>`` / attribute-``<invoke>`` calls looks for the close tag
  after the open tag; the original could loop forever or duplicate text when a close tag came
  first. The clean-up is one left-to-right pass, so a marker that only forms once a block is cut
  out is not removed again.
* With more than 32 distinct GLM call lines in one response, each line is removed where it stands
  instead of every copy of its text (which would make the clean-up quadratic).
"""

from __future__ import annotations

import json
import logging
import math
import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)

__all__ = [
    "ToolCall",
    "build_native_assistant_history",
    "build_native_assistant_history_from_parsed_calls",
    "default_param_for_tool",
    "detect_tool_call_parse_issue",
    "extract_json_values",
    "map_tool_name_alias",
    "parse_arguments_value",
    "parse_glm_shortened_body",
    "parse_glm_style_tool_calls",
    "parse_tool_call_value",
    "parse_tool_calls",
    "parse_tool_calls_from_json_value",
    "resolve_display_text",
    "strip_think_tags",
]


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


MISSING: Any = object()

# --------------------------------------------------------------------------------------------
# Text primitives with Rust semantics
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# JSON with serde_json semantics
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Names and JSON call shapes
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Think tags
# --------------------------------------------------------------------------------------------


def _strip_think_untrimmed(text: str) -> str:
    parts = []
    rest = 0
    while True:
        start = text.find("<think>", rest)
        if start < 0:
            parts.append(text[rest:])
            break
        parts.append(text[rest:start])
        end = text.find("</think>", start)
        if end < 0:  # unclosed: drop the tail so half-finished reasoning never shows
            break
        rest = end + len("</think>")
    return "".join(parts)


def strip_think_tags(text: str) -> str:
    """Remove every ``<think>…</think>``; an unclosed ``<think>`` drops the rest. Trimmed."""
    return _trim(_strip_think_untrimmed(text))


# --------------------------------------------------------------------------------------------
# XML bodies and MiniMax invoke markup
# --------------------------------------------------------------------------------------------

_XML_META_TAGS = frozenset(("tool_call", "toolcall", "tool-call", "invoke", "thinking", "thought",
                            "analysis", "reasoning", "reflection"))
_XML_OPEN_TAG = re.compile(r"<([a-zA-Z_][a-zA-Z0-9_-]*)>")
_XML_CLOSE_TAG = re.compile(r"</([a-zA-Z_][a-zA-Z0-9_-]*)>")


def _extract_xml_pairs(text: str) -> list[tuple[str, str]]:
    """Every ``<tag>…</tag>`` pair (no backreferences), inner text trimmed."""
    closes: dict[str, list[int]] = defaultdict(list)
    for m in _XML_CLOSE_TAG.finditer(text):
        closes[m.group(1)].append(m.start())
    pairs = []
    pos = 0
    while True:
        m = _XML_OPEN_TAG.search(text, pos)
        if m is None:
            return pairs
        name = m.group(1)
        open_end = m.end()
        positions = closes.get(name, ())
        k = bisect_left(positions, open_end)
        if k < len(positions):
            close = positions[k]
            pairs.append((name, _trim(text[open_end:close])))
            pos = close + len(name) + 3
        else:
            pos = open_end


def _parse_xml_tool_calls(body: str) -> list[_Parsed]:
    trimmed = _trim(body)
    if not trimmed.startswith("<") or ">" not in trimmed:
        return []
    calls = []
    for name, inner in _extract_xml_pairs(trimmed):
        if _ascii_lower(name) in _XML_META_TAGS or not inner:
            continue
        values = extract_json_values(inner)
        if values:
            first = values[0]
            args: dict[str, Any] = first if isinstance(first, dict) else {"value": first}
        else:
            args = {key: value for key, value in _extract_xml_pairs(inner)
                    if _ascii_lower(key) not in _XML_META_TAGS and value}
            if not args:
                args = {"content": inner}
        calls.append(_Parsed(map_tool_name_alias(name), args))
    return calls


_NAME_ATTR_CI = re.compile(r"""(?i)name\s*=\s*(?:"([^"]++)"|'([^']++)')""")


class _NamedBlock(NamedTuple):
    start: int
    end: int
    name: str
    body: str


def _named_blocks_ci(text: str, tag: str) -> list[_NamedBlock]:
    """Matches of ``(?is)<TAG\\b[^>]*\\bname\\s*=\\s*(?:"([^"]+)"|'([^']+)')[^>]*>(.*?)</TAG>``
    with the leftmost-first semantics of the original regex, in linear time.

    The tail after the ``name`` attribute does not depend on where the tag opened, so it is
    computed once per attribute; a tag then takes the rightmost attribute (greedy ``[^>]*``)
    before its first ``>`` whose tail matches.
    """
    lower = _ascii_lower(text)
    close_lit = f"</{tag}>"
    if f"<{tag}" not in lower or close_lit not in lower:
        return []
    gt = _literal_seeker(text, ">")
    close = _literal_seeker(lower, close_lit)
    tails: list[_NamedBlock] = []
    at = lower.find("name")
    while at >= 0:
        p, at = at, lower.find("name", at + 1)
        if p > 0 and (lower[p - 1] == "_" or lower[p - 1].isalnum()):
            continue  # \bname: the attribute name must start a word
        attr = _NAME_ATTR_CI.match(text, p)
        if attr is None:
            continue
        body_open = gt(attr.end())
        if body_open < 0:
            break
        body_close = close(body_open + 1)
        if body_close < 0:
            break
        name = attr.group(1) if attr.group(1) is not None else attr.group(2)
        tails.append(_NamedBlock(p, body_close + len(close_lit), name,
                                 text[body_open + 1:body_close]))
    starts = [t.start for t in tails]
    blocks = []
    open_re = re.compile(rf"<{re.escape(tag)}(?!\w)")
    tag_len = len(tag) + 1
    pos = 0
    while tails:
        m = open_re.search(lower, pos)
        if m is None:
            break
        a = m.start()
        first_gt = gt(a + tag_len)
        if first_gt < 0:
            break
        k = bisect_left(starts, first_gt) - 1
        if k >= 0 and starts[k] >= a + tag_len:
            tail = tails[k]
            blocks.append(_NamedBlock(a, tail.end, tail.name, tail.body))
            pos = tail.end
        else:
            pos = a + 1
    return blocks


def _parse_minimax_invoke_calls(response: str) -> tuple[str, list[_Parsed]] | None:
    calls = []
    text_parts = []
    last_end = 0
    for block in _named_blocks_ci(response, "invoke"):
        before = _trim(response[last_end:block.start])
        if before:
            text_parts.append(before)
        last_end = block.end
        name = _trim(block.name)
        if not name:
            continue
        body = _trim(block.body)
        args: dict[str, Any] = {}
        for param in _named_blocks_ci(body, "parameter"):
            key = _trim(param.name)
            value = _trim(param.body)
            if not key or not value:
                continue
            values = extract_json_values(value)
            args[key] = values[0] if values else value
        if not args:
            values = extract_json_values(body)
            if values:
                first = values[0]
                args = first if isinstance(first, dict) else {"value": first}
            elif body:
                args = {"content": body}
        calls.append(_Parsed(map_tool_name_alias(name), args))
    if not calls:
        return None
    after = _trim(response[last_end:])
    if after:
        text_parts.append(after)
    text = "\n".join(text_parts)
    for marker in ("<minimax:tool_call>", "</minimax:tool_call>", "<minimax:toolcall>",
                   "</minimax:toolcall>"):
        text = text.replace(marker, "")
    return _trim(text), calls


# --------------------------------------------------------------------------------------------
# GLM shorthand
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Malformed file_write recovery (ZH: a model put raw quotes inside ``content``)
# --------------------------------------------------------------------------------------------

_CLOSE_TAG_PREFIXES = ("</tool_call>", "</tool_calls>", "</tools>", "</toolcall>", "</tool-call>",
                       "</invoke>", "</minimax:tool_call>", "</minimax:toolcall>", "```")


def _skip_ws(s: str, i: int) -> int:
    n = len(s)
    while i < n and s[i] in _RUST_WS_SET:
        i += 1
    return i


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


# --------------------------------------------------------------------------------------------
# The tag loop
# --------------------------------------------------------------------------------------------

_OPEN_TAGS = ("<tool_call>", "<tool_calls>", "<toolcall>", "<tool-call>", "<tools>", "<invoke>",
              "<minimax:tool_call>", "<minimax:toolcall>")
_CLOSE_TAGS = ("</tool_call>", "</tool_calls>", "</toolcall>", "</tool-call>", "</tools>",
               "</invoke>", "</minimax:tool_call>", "</minimax:toolcall>")
_MATCHING_CLOSE = dict(zip(_OPEN_TAGS, _CLOSE_TAGS, strict=True))
_OPEN_TAG_RE = re.compile("|".join(map(re.escape, _OPEN_TAGS)))
_CLOSE_TAG_RE = re.compile("|".join(map(re.escape, _CLOSE_TAGS)))


def _parse_tag_body(inner: str) -> list[_Parsed]:
    """JSON, then a malformed ``file_write``, then XML, then GLM shorthand."""
    calls = [c for value in extract_json_values(inner) for c in _calls_from_json_value(value)]
    if calls:
        return calls
    recovered = _parse_malformed_file_write_call(inner)
    if recovered is not None:
        return [recovered]
    calls = _parse_xml_tool_calls(inner)
    if calls:
        return calls
    glm = _parse_glm_shortened(inner)
    return [glm] if glm is not None else []


def _strip_leading_close_tags(text: str, pos: int) -> int:
    n = len(text)
    while True:
        pos = _skip_ws(text, pos)
        if not text.startswith("</", pos):
            return pos
        close_end = text.find(">", pos)
        if close_end < 0:
            return n
        pos = close_end + 1


def _has_non_empty_string(value: Any, key: str) -> bool:
    found = _json_object_get(value, key)
    return isinstance(found, str) and bool(_trim(found))


def _looks_like_tools_wrapper_invocation(value: Any) -> bool:
    """A ``<tools>`` body is run only when it is one canonical invocation: an object with a name
    and ``arguments``, and nothing that describes a tool (``description``, ``parameters``) or
    wraps another call (``function``, ``tool_calls``)."""
    if not isinstance(value, dict):
        return False
    if "description" in value or "parameters" in value:
        return False
    if "function" in value or "tool_calls" in value:
        return False
    return _has_non_empty_string(value, "name") and "arguments" in value


class _ParseState:
    """The cleaned response and the memoised searches the steps share."""

    def __init__(self, response: str) -> None:
        self.response = response
        self.scanner = _JsonScanner(response)
        self.open_tag, self.open_found = _regex_seeker(response, _OPEN_TAG_RE)
        self.any_close, self.close_found = _regex_seeker(response, _CLOSE_TAG_RE)
        self.close = {tag: _literal_seeker(response, tag) for tag in _CLOSE_TAGS}
        self.text_parts: list[str] = []
        self.calls: list[_Parsed] = []
        self.rejected: list[tuple[int, int]] = []
        self.malformed_tags = 0
        self.malformed_fences = 0

    def log_malformed(self) -> None:
        # One line per response, however many broken blocks a hostile reply carries.
        if self.malformed_tags:
            logger.warning("Malformed <tool_call>: expected tool-call object in tag body "
                           "(JSON/XML/GLM) (%d block(s))", self.malformed_tags)
        if self.malformed_fences:
            logger.warning("Found ```tool <name> block but could not parse JSON arguments "
                           "(%d block(s))", self.malformed_fences)

    def push_text(self, text: str) -> None:
        trimmed = _trim(text)
        if trimmed:
            self.text_parts.append(trimmed)

    def tools_span(self, body_start: int) -> tuple[int, int, Any]:
        """``(body_end, close_len, value)`` of a ``<tools>`` wrapper, delimited by parsing so a
        close tag quoted inside the arguments cannot end it (``value`` is ``MISSING`` when the
        body is not exactly one JSON value)."""
        text = self.response
        n = len(text)
        lead = _skip_ws(text, body_start)
        found = self.scanner.stream_value_at(lead) if lead < n else None
        if found is not None:
            value, value_end = found
            trailing = _skip_ws(text, value_end)
            for tag in _CLOSE_TAGS:
                if text.startswith(tag, trailing):
                    return trailing, len(tag), value
            if trailing >= n:
                return n, 0, value
            close = self.any_close(value_end)
            if close >= 0:
                return close, len(self.close_found[close]), MISSING
            return n, 0, MISSING
        if lead < n and text[lead] in "{[":
            return n, 0, MISSING  # malformed JSON may hide a close tag inside a string
        close = self.any_close(body_start)
        if close >= 0:
            return close, len(self.close_found[close]), MISSING
        return n, 0, MISSING

    def handle_tools(self, start: int) -> int:
        body_start = start + len("<tools>")
        body_end, close_len, value = self.tools_span(body_start)
        admitted = []
        if value is not MISSING and _looks_like_tools_wrapper_invocation(value):
            admitted = _calls_from_json_value(value)
        if admitted:
            self.calls.extend(admitted)
        else:
            self.push_text(self.response[body_start:body_end])
            self.rejected.append((start, body_end + close_len))
        return body_end + close_len

    def handle_unclosed(self, body_start: int) -> int:
        """The position to continue from after an open tag without its close tag, or -1 to stop
        with the tag kept as text."""
        text = self.response
        cross = self.any_close(body_start)
        if cross >= 0:
            parsed = _parse_tag_body(text[body_start:cross])
            if parsed:
                self.calls.extend(parsed)
                return cross + len(self.close_found[cross])
        lead = _skip_ws(text, body_start)
        if text.startswith("{", lead):
            json_end = self.scanner.brace_end(lead)
            if json_end >= 0 and all(c in JSON_WS for c in text[body_start:lead]):
                found = self.scanner.value_at(lead)
                if found is not None and found[1] == json_end:
                    parsed = _calls_from_json_value(found[0])
                    if parsed:
                        self.calls.extend(parsed)
                        return _strip_leading_close_tags(text, json_end)
        found = self.scanner.first_value_from(lead)
        if found is not None:
            parsed = _calls_from_json_value(found[0])
            if parsed:
                self.calls.extend(parsed)
                return _strip_leading_close_tags(text, found[1])
        rest = text[body_start:]
        recovered = _parse_malformed_file_write_call(rest)
        if recovered is not None:
            self.calls.append(recovered)
            return len(text)
        glm = _parse_glm_shortened(_trim(rest))
        if glm is not None:
            self.calls.append(glm)
            return len(text)
        return -1

    def tag_loop(self) -> int:
        """Step 3; returns where the unparsed remainder starts."""
        text = self.response
        pos = 0
        while True:
            start = self.open_tag(pos)
            if start < 0:
                return pos
            open_tag = self.open_found[start]
            self.push_text(text[pos:start])
            if open_tag == "<tools>":
                pos = self.handle_tools(start)
                continue
            body_start = start + len(open_tag)
            close_tag = _MATCHING_CLOSE[open_tag]
            close = self.close[close_tag](body_start)
            if close >= 0:
                parsed = _parse_tag_body(text[body_start:close])
                if parsed:
                    self.calls.extend(parsed)
                else:
                    self.malformed_tags += 1
                pos = close + len(close_tag)
                continue
            resume = self.handle_unclosed(body_start)
            if resume < 0:
                return start
            pos = resume

    def hits_rejected(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` overlaps a refused ``<tools>`` span (spans are recorded in
        order and do not overlap, so the last one starting before ``end`` decides)."""
        k = bisect_left(self.rejected, (end, -1)) - 1
        if start >= end or k < 0:
            return False
        span_start, span_end = self.rejected[k]
        return span_start < span_end and start < span_end


# --------------------------------------------------------------------------------------------
# Fences and the other fallbacks
# --------------------------------------------------------------------------------------------

_MD_TOOL_CALL_OPEN = re.compile(r"```(?:tool[_-]?call|invoke)\s*\n")
_MD_TOOL_CALL_CLOSE = re.compile(r"```|</tool[_-]?call>|</toolcall>|</invoke>|</minimax:toolcall>")
_MD_TOOL_NAME_OPEN = re.compile(r"```tool\s+(\w+)\s*\n")


def _fence_matches(state: _ParseState, opener: re.Pattern[str],
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


def _markdown_tool_call_fences(state: _ParseState) -> bool:
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


def _markdown_tool_name_fences(state: _ParseState) -> bool:
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


def _adopt_fence_calls(state: _ParseState, parts: list[str], calls: list[_Parsed],
                       last_end: int) -> bool:
    if not calls:
        return False
    after = _trim(state.response[last_end:])
    if after:
        parts.append(after)
    state.text_parts = parts
    state.calls.extend(calls)
    return True


_ATTR_INVOKE_OPEN = re.compile(r'<invoke\s+name="([^"]++)"')
_ATTR_PARAM_OPEN = re.compile(r'<parameter\s+name="([^"]++)"')


def _parse_xml_attribute_tool_calls(text: str) -> list[_Parsed]:
    calls = []
    gt = _literal_seeker(text, ">")
    close = _literal_seeker(text, "</invoke>")
    pos = 0
    while True:
        m = _ATTR_INVOKE_OPEN.search(text, pos)
        if m is None:
            return calls
        body_open = gt(m.end())
        if body_open < 0:
            return calls
        body_close = close(body_open + 1)
        if body_close < 0:
            return calls
        arguments = _attribute_parameters(text[body_open + 1:body_close])
        if arguments:
            calls.append(_Parsed(map_tool_name_alias(m.group(1)), arguments))
        pos = body_close + len("</invoke>")


def _attribute_parameters(inner: str) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    gt = _literal_seeker(inner, ">")
    lt = _literal_seeker(inner, "<")
    pos = 0
    while True:
        m = _ATTR_PARAM_OPEN.search(inner, pos)
        if m is None:
            return arguments
        value_start = gt(m.end())
        if value_start < 0:
            return arguments
        value_end = lt(value_start + 1)
        if value_end < 0:
            return arguments
        if inner.startswith("</parameter>", value_end):
            arguments[m.group(1)] = inner[value_start + 1:value_end]
            pos = value_end + len("</parameter>")
        else:
            pos = m.start() + 1


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


_PERL_OPEN = re.compile(r"(?:\[TOOL_CALL\]|TOOL_CALL)\s*\{")
_PERL_CLOSE = re.compile(r"\}\}\s*(?:\[/TOOL_CALL\]|/TOOL_CALL)")
_PERL_TOOL_NAME = re.compile(r'tool\s*=>\s*"([^"]++)"')
_PERL_ARGS_BLOCK = re.compile(r"(?s)args\s*=>\s*\{(.+?)(?:\}|\Z)")
_PERL_ARG = re.compile(r'--(\w+)\s+"([^"]++)"')


def _parse_perl_style_tool_calls(text: str) -> list[_Parsed]:
    calls = []
    close_seek, _found = _regex_seeker(text, _PERL_CLOSE)
    pos = 0
    while True:
        m = _PERL_OPEN.search(text, pos)
        if m is None:
            return calls
        close = close_seek(m.end() + 1)
        if close < 0:
            return calls
        content = text[m.end():close]
        end = _PERL_CLOSE.match(text, close)
        pos = end.end() if end is not None else close + 1
        name = _PERL_TOOL_NAME.search(content)
        if name is None:
            continue
        block = _PERL_ARGS_BLOCK.search(content)
        args_block = block.group(1) if block is not None else ""
        arguments = {k: v for k, v in _PERL_ARG.findall(args_block)}
        if arguments:
            calls.append(_Parsed(map_tool_name_alias(name.group(1)), arguments))


_FUNCTION_CALL = re.compile(r"(?s)<FunctionCall>\s*(\w+)\s*<code>([^<]+)</code>\s*</FunctionCall>")


def _parse_function_call_tool_calls(text: str) -> list[_Parsed]:
    calls = []
    for m in _FUNCTION_CALL.finditer(text):
        arguments = {}
        for raw_line in _rust_lines(m.group(2)):
            line = _trim(raw_line)
            gt = line.find(">")
            if gt >= 0:
                key = _trim(line[:gt])
                value = _trim(line[gt + 1:])
                if key and value:
                    arguments[key] = value
        if arguments:
            calls.append(_Parsed(map_tool_name_alias(m.group(1)), arguments))
    return calls


def _fallback_steps(state: _ParseState, remaining: str) -> str:
    """Steps 6-9 on the unparsed remainder; returns what is left of it as text."""
    calls = _parse_xml_attribute_tool_calls(remaining)
    if calls:
        state.calls.extend(calls)
        # One block per call, as the original removes one per call.
        state.push_text(_remove_blocks(remaining, "<minimax:toolcall>", "</minimax:toolcall>",
                                       limit=len(calls)))
        return ""
    calls = _parse_perl_style_tool_calls(remaining)
    if calls:
        state.calls.extend(calls)
        # "/TOOL_CALL" contains "TOOL_CALL": the original removes from the first "TOOL_CALL"
        # through the first "/TOOL_CALL", which may be the same marker.
        state.push_text(_remove_blocks(remaining, "TOOL_CALL", "/TOOL_CALL", close_from=-1))
        return ""
    calls = _parse_function_call_tool_calls(remaining)
    if calls:
        state.calls.extend(calls)
        state.push_text(_remove_blocks(remaining, "<FunctionCall>", "</FunctionCall>"))
        return ""
    glm = _parse_glm_lines(remaining)
    if glm:
        state.calls.extend(_Parsed(name, args) for name, args, _raw in glm)
        state.push_text(_remove_raw_lines(remaining, [raw for _n, _a, raw in glm]))
        return ""
    return remaining


# --------------------------------------------------------------------------------------------
# parse_tool_calls
# --------------------------------------------------------------------------------------------


def _parse_raw(text: str) -> tuple[str, list[_Parsed]]:
    response = strip_think_tags(text)

    whole = json_loads(response)
    if whole is not _NO_VALUE:
        calls = _calls_from_json_value(whole)
        if calls:
            content = _json_object_get(whole, "content")
            return (_trim(content) if isinstance(content, str) else ""), calls

    recovered = _parse_malformed_file_write_call(response)
    if recovered is not None:
        return "", [recovered]

    # MiniMax markup anywhere would otherwise run legacy calls nested inside a refused
    # <tools> wrapper before the wrapper is looked at.
    if "<tools>" not in response:
        minimax = _parse_minimax_invoke_calls(response)
        if minimax is not None:
            return minimax

    state = _ParseState(response)
    remaining_start = state.tag_loop()
    remaining = response[remaining_start:]

    if not state.calls and (_markdown_tool_call_fences(state) or _markdown_tool_name_fences(state)):
        remaining = ""
    if not state.calls:
        remaining = _fallback_steps(state, remaining)

    state.push_text(remaining)
    state.log_malformed()
    return "\n".join(state.text_parts), state.calls


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """Split a model response into the text to show and the tool calls it asks for.

    Never raises: input that cannot be understood stays text.
    """
    try:
        visible, calls = _parse_raw(text)
    except Exception:  # pragma: no cover - a parser bug must not break the turn
        logger.exception("tool-call parsing failed; treating the response as text")
        try:
            return strip_think_tags(text), []
        except Exception:
            return "", []
    return visible, [_finish(c) for c in calls]


# --------------------------------------------------------------------------------------------
# Loop helpers
# --------------------------------------------------------------------------------------------

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
