"""Reasoning blocks (``<think>…</think>``), which never reach the user or the call parsers."""

from __future__ import annotations

from ._text import _trim


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
