"""Model requests as they were sent, rebuilt from their stored payloads.

A request's payload holds only the wire messages it added after the previous request's
(``message_offset``, see ``agents.runtime.loop.conversation.Conversation.request_trace``), and
the tool definitions (``tool_specs``) only when it starts over (offset 0). Rebuilding walks a
turn's request payloads in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any


def full_requests(requests: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Each of a turn's requests (payloads in order) with all the messages it sent and the
    definitions of the tools it offered, in the order it offered them."""
    wire: list[dict[str, Any]] = []
    specs: dict[str, dict[str, Any]] = {}
    for request in requests:
        offset = request.get("message_offset") or 0
        wire = wire[:offset] + list(request.get("messages") or [])
        for spec in request.get("tool_specs") or ():
            if isinstance(spec, dict) and isinstance(spec.get("name"), str):
                specs[spec["name"]] = spec
        names = [n for n in request.get("tools") or () if isinstance(n, str)]
        yield {**request, "message_offset": 0, "messages": wire,
               "tool_specs": [specs[name] for name in names if name in specs]}


def conversation_of(requests: Iterable[dict[str, Any]],
                    tool_names: list[str] | None) -> tuple[list, list]:
    """The messages the last of ``requests`` sent, and the definitions of those of its tools
    named in ``tool_names``."""
    last = deque(full_requests(requests), maxlen=1)
    if not last:
        return [], []
    names = set(tool_names or [])
    return last[0]["messages"], [s for s in last[0]["tool_specs"] if s["name"] in names]
