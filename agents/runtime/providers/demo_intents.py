"""What the demo model reads in a person's words: the requests it turns into tool calls.

"remember ..." -> ``memory_store {content, key?}``, "forget ..." -> ``memory_forget {key}``,
arithmetic -> ``calculator {expression}``, the time -> ``current_time {timezone?}``, "what is
my ..." -> ``memory_recall {query}``, a URL -> ``http_fetch {url}``; several in one message,
in the order they are written. ``demo`` decides which of them to call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_URL = re.compile(r"https?://[^\s<>\"'`\])}]+")
_DATE_OR_CLOCK = re.compile(r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b")
_WORD_OPERATORS = re.compile(
    r"(?i)\b(?:multiplied by|times|divided by|over|plus|minus|to the power of|mod)\b")
_WORD_TO_SYMBOL = {"multiplied by": "*", "times": "*", "divided by": "/", "over": "/",
                   "plus": "+", "minus": "-", "to the power of": "^", "mod": "%"}
_OPERAND = r"\(*\s*[-+]?\s*\d+(?:\.\d+)?\s*\)*"
_EXPRESSION = re.compile(rf"{_OPERAND}(?:\s*(?:\*\*|[-+*/×÷^%xX])\s*{_OPERAND})+")
_ARITHMETIC_CUE = re.compile(r"(?i)\b(?:what|calculate|compute|evaluate|how much|solve)\b|[=?]")
_HAS_BINARY_OPERATOR = re.compile(r"[\d)]\s*(?:[-+*/%^]|\*\*)")
_NON_MINUS_OPERATOR = re.compile(r"[+*/%^]")
_TIME = re.compile(
    r"(?i)\b(?:(?:time|date|day) is it|what(?:'s| is) the (?:current |local )?(?:time|date)"
    r"|current (?:time|date)|today'?s date|what day is (?:it|today)|time (?:right )?now"
    r"|time in)\b")
_TIMEZONE = re.compile(r"\bin ([A-Za-z_]+/[A-Za-z_]+|[A-Z][a-zA-Z]+(?: [A-Z][a-zA-Z]+)?|utc|gmt)\b")
_CITY_ZONES = {
    "utc": "UTC", "gmt": "UTC", "tokyo": "Asia/Tokyo", "japan": "Asia/Tokyo",
    "seoul": "Asia/Seoul", "korea": "Asia/Seoul", "beijing": "Asia/Shanghai",
    "shanghai": "Asia/Shanghai", "singapore": "Asia/Singapore", "delhi": "Asia/Kolkata",
    "mumbai": "Asia/Kolkata", "india": "Asia/Kolkata", "dubai": "Asia/Dubai",
    "moscow": "Europe/Moscow", "istanbul": "Europe/Istanbul", "berlin": "Europe/Berlin",
    "paris": "Europe/Paris", "madrid": "Europe/Madrid", "rome": "Europe/Rome",
    "amsterdam": "Europe/Amsterdam", "london": "Europe/London", "dublin": "Europe/Dublin",
    "new york": "America/New_York", "chicago": "America/Chicago", "denver": "America/Denver",
    "los angeles": "America/Los_Angeles", "san francisco": "America/Los_Angeles",
    "toronto": "America/Toronto", "sao paulo": "America/Sao_Paulo",
    "sydney": "Australia/Sydney", "melbourne": "Australia/Melbourne",
    "auckland": "Pacific/Auckland",
}
_REMEMBER = re.compile(
    r"(?is)^\s*(?:please\s+)?(?:remember|memori[sz]e|keep in mind|make a note)\b"
    r"(?:\s+that)?[\s:,-]+(.+?)[\s.!]*$")
_MEMORY_KEY = re.compile(r"(?i)\bmy ([a-z][a-z0-9 _-]{0,40}?) (?:is|are|was|were)\b")
_FORGET = re.compile(
    r"(?is)^\s*(?:please\s+)?forget\b(?:\s+(?:about|that))?\s+(?:my\s+)?(.+?)[\s.!?]*$")
_RECALL = re.compile(
    r"(?i)\b(?:what(?:'s| is| are| was| were) my|do you (?:remember|know|recall)"
    r"|what do you (?:remember|know) about|what did i (?:tell you|say) about|recall)"
    r"\s+(.+?)[\s.!?]*$")
_RECALL_TRIM = re.compile(
    r"(?i)^(?:about |what |that )?(?:my |the )?|\s+(?:is|are|was|were|called|named)$")
_SLUG = re.compile(r"[^a-z0-9]+")


@dataclass(slots=True)
class Call:
    """A tool call the demo model makes: the tool, its arguments, and where in the message the
    request was written (calls go in that order)."""

    name: str
    arguments: dict[str, Any]
    position: int = 0


def intents(text: str) -> list[Call]:
    """The tool calls ``text`` asks for, in the order it asks."""
    remember = _REMEMBER.match(text)
    if remember:
        content = remember.group(1).strip()
        arguments: dict[str, Any] = {"content": content}
        key = _MEMORY_KEY.search(content)
        if key:
            arguments["key"] = _slug(key.group(1))
        return [Call("memory_store", arguments)]
    forget = _FORGET.match(text)
    if forget:
        return [Call("memory_forget", {"key": _slug(forget.group(1))})]
    calls = _arithmetic(text) + _time(text) + _recall(text) + _fetch(text)
    calls.sort(key=lambda c: c.position)
    return calls


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group(0))


def _arithmetic(text: str) -> list[Call]:
    # Blank out what looks numeric but is not arithmetic, keeping positions for ordering.
    scan = _URL.sub(_blank, text)
    scan = _DATE_OR_CLOCK.sub(_blank, scan)
    scan = _WORD_OPERATORS.sub(
        lambda m: _WORD_TO_SYMBOL[" ".join(m.group(0).lower().split())].center(len(m.group(0))),
        scan)
    cue = _ARITHMETIC_CUE.search(text) is not None
    calls = []
    for match in _EXPRESSION.finditer(scan):
        expression = _normalise_expression(match.group(0))
        if not _HAS_BINARY_OPERATOR.search(expression):
            continue
        only_minus = not _NON_MINUS_OPERATOR.search(expression)
        if only_minus and not cue:
            continue
        calls.append(Call("calculator", {"expression": expression}, match.start()))
    return calls


def _normalise_expression(raw: str) -> str:
    expression = "".join(raw.split())
    expression = expression.replace("×", "*").replace("÷", "/").replace("x", "*").replace("X", "*")
    expression = expression.replace("^", "**")
    # A bracket the expression never opened (or closed) belongs to the sentence around it.
    while expression.endswith(")") and expression.count(")") > expression.count("("):
        expression = expression[:-1]
    while expression.startswith("(") and expression.count("(") > expression.count(")"):
        expression = expression[1:]
    return expression


def _time(text: str) -> list[Call]:
    match = _TIME.search(text)
    if not match:
        return []
    arguments: dict[str, Any] = {}
    zone = _TIMEZONE.search(text, match.start())
    if zone:
        name = zone.group(1)
        known = _CITY_ZONES.get(name.lower())
        if known:
            arguments["timezone"] = known
        elif "/" in name:
            arguments["timezone"] = name
    return [Call("current_time", arguments, match.start())]


def _recall(text: str) -> list[Call]:
    match = _RECALL.search(text)
    if not match:
        return []
    query = match.group(1)
    for _ in range(2):
        query = _RECALL_TRIM.sub("", query).strip()
    if not query or _TIME.search(match.group(0)):
        return []
    return [Call("memory_recall", {"query": query}, match.start())]


def _fetch(text: str) -> list[Call]:
    return [Call("http_fetch", {"url": m.group(0).rstrip(".,;:!?")}, m.start())
            for m in _URL.finditer(text)]


def _slug(text: str) -> str:
    return _SLUG.sub("_", text.lower()).strip("_")[:64] or "note"
