"""Server-sent events, as both OpenAI-compatible servers and Anthropic send them.

Each ``data:`` line is dispatched on its own, with the most recent ``event:`` name. Neither API
spreads one payload over several ``data:`` lines, and dispatching per line keeps a server that
forgets the blank separator lines working. Comments, other fields and junk lines are skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str
    data: str


async def iter_sse(lines: AsyncIterable[str]) -> AsyncIterator[SseEvent]:
    event = ""
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            event = ""
            continue
        if line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value.strip()
        elif name == "data":
            yield SseEvent(event, value)
