"""The tag loop (step 3 of ``parse_tool_calls``): ``<tool_call>`` blocks and their aliases,
closed, mis-closed or unclosed, and ``<tools>`` wrappers.

``_ParseState`` also carries what the later steps share: the visible text so far, the calls,
and the ``<tools>`` spans refused as declarations (a fence inside one must not run either).
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_left
from typing import Any

from ._calls import _calls_from_json_value, _Parsed
from ._file_write_recovery import _parse_malformed_file_write_call
from ._glm import _parse_glm_shortened
from ._json_values import MISSING, _json_object_get, _JsonScanner, extract_json_values
from ._text import JSON_WS, _literal_seeker, _regex_seeker, _skip_ws, _trim
from ._xml_bodies import _parse_xml_tool_calls

# Named after the package, as before the split, so log filters and formats see the same name.
logger = logging.getLogger(__package__)


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
