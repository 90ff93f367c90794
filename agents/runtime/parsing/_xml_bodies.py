"""XML bodies inside a tool-call tag: ``<tool_call><shell><command>ls</command></shell>…``.

Each ``<name>…</name>`` pair is one call; its inner text is JSON arguments, else child pairs as
arguments, else the whole text as ``content``.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import defaultdict
from typing import Any

from ._calls import _Parsed, map_tool_name_alias
from ._json_values import extract_json_values
from ._text import _ascii_lower, _trim

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
