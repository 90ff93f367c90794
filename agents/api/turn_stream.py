"""Following a turn from a web request: its live events while it runs, and its end.

The worker announces every change of a trace on the channel layer (``traces.live``); this joins
the trace's group before it looks at the database, so nothing between the two is missed, and
looks at the database again whenever the layer is quiet for a moment (a lost frame, a worker
that died): the database says when the turn has ended, the layer only says it sooner.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from traces.live import trace_group
from traces.models import Trace

ENDED = frozenset(s for s in Trace.Status.values if s not in Trace.ACTIVE)
QUIET_S = 1.0


class TurnTimeout(Exception):
    """The turn did not end within the time the caller waits."""


@sync_to_async
def _trace(trace_id: int) -> Trace:
    return Trace.objects.select_related("agent", "conversation", "api_key").get(pk=trace_id)


async def trace_events(trace: Trace, *, timeout_s: float) -> AsyncIterator[dict[str, Any]]:
    """The trace's live payloads (``delta``, ``step``, ``state``, ``trace``) until it ends;
    then one last ``{"event": "end", "trace": <Trace>}`` with the trace as stored. Raises
    ``TurnTimeout`` after ``timeout_s``."""
    layer = get_channel_layer()
    deadline = time.monotonic() + timeout_s
    channel = group = None
    if layer is not None:
        channel = await layer.new_channel()
        group = trace_group(trace.uuid)
        await layer.group_add(group, channel)
    try:
        current = await _trace(trace.pk)
        while current.status not in ENDED:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TurnTimeout(f"The turn did not end within {timeout_s:g} s.")
            payload = None
            if layer is not None:
                try:
                    message = await asyncio.wait_for(layer.receive(channel), min(QUIET_S, left))
                    payload = message.get("payload") if isinstance(message, dict) else None
                except TimeoutError:
                    payload = None
            else:
                await asyncio.sleep(min(QUIET_S, left))
            if payload is None:
                current = await _trace(trace.pk)
                continue
            yield payload
            if payload.get("event") == "trace" and payload.get("status") in ENDED:
                current = await _trace(trace.pk)
        yield {"event": "end", "trace": current}
    finally:
        if layer is not None:
            await layer.group_discard(group, channel)


async def turn_wait(trace: Trace, *, timeout_s: float) -> Trace:
    """The trace once its turn has ended (``TurnTimeout`` after ``timeout_s``)."""
    async for payload in trace_events(trace, timeout_s=timeout_s):
        if payload.get("event") == "end":
            return payload["trace"]
    raise TurnTimeout(f"The turn did not end within {timeout_s:g} s.")  # pragma: no cover
