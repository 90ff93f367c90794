"""MiniMax ``<invoke name=…><parameter name=…>…</parameter></invoke>`` markup.

Two readers, as in ZeroClaw: the main one (any case, either quote, before the tag loop) and a
strict fallback (double quotes, exact case) tried on what the tag loop leaves unparsed.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, NamedTuple

from ._calls import _Parsed, map_tool_name_alias
from ._json_values import extract_json_values
from ._text import _ascii_lower, _literal_seeker, _trim

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


_ATTR_INVOKE_OPEN = re.compile(r'<invoke\s+name="([^"]++)"')
_ATTR_PARAM_OPEN = re.compile(r'<parameter\s+name="([^"]++)"')


def _parse_xml_attribute_tool_calls(text: str) -> list[_Parsed]:
    calls = []
    for name, body in _attribute_blocks(text, _ATTR_INVOKE_OPEN, "</invoke>", "</invoke>"):
        arguments = dict(_attribute_blocks(body, _ATTR_PARAM_OPEN, "<", "</parameter>"))
        if arguments:
            calls.append(_Parsed(map_tool_name_alias(name), arguments))
    return calls


def _attribute_blocks(text: str, opener: re.Pattern[str], body_stop: str,
                      close_tag: str) -> Iterator[tuple[str, str]]:
    """``(name, body)`` of each ``opener … > body close_tag`` block, left to right.

    The body runs from the first ``>`` after the opener to the first ``body_stop``. An
    ``<invoke>`` body stops only at its close tag; a ``<parameter>`` value stops at the first
    ``<``, and when that is not ``close_tag`` the block is skipped and the search resumes one
    character after the opener. A missing ``>`` or ``body_stop`` ends the search.
    """
    gt = _literal_seeker(text, ">")
    stop = _literal_seeker(text, body_stop)
    pos = 0
    while True:
        m = opener.search(text, pos)
        if m is None:
            return
        body_open = gt(m.end())
        if body_open < 0:
            return
        body_end = stop(body_open + 1)
        if body_end < 0:
            return
        if text.startswith(close_tag, body_end):
            yield m.group(1), text[body_open + 1:body_end]
            pos = body_end + len(close_tag)
        else:
            pos = m.start() + 1
