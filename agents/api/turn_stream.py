"""Following a turn from a web request: its live events while it runs, and its end.

The worker announces every change of a trace on the channel layer (``traces.record.live``); this
joins the trace's group before it looks at the database, so nothing between the two is missed, and
looks at the database again whenever the layer is quiet for a moment (a lost frame, a worker that
died): the database says when the turn has ended, the layer only says it sooner.

A tool call that waits for a person's approval is told as an ``approval`` payload of its own
(``approval_payload``: the call, its tool and arguments, since when it waits and where to decide
it), once per call: when its step is announced, when a stream opens on a turn that waits
already, and when a quiet look at the database finds a wait the layer's frames did not tell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from datetime import timedelta
from typing import Any, TypeVar

from channels.layers import get_channel_layer
from django.db.models import Exists, OuterRef, QuerySet, Subquery
from django.urls import NoReverseMatch, reverse

from agents.models import Message
from agents.turns.signals import ended_signal_wait
from agents.turns.tool_cards import ToolCard, card_steps, tool_cards
from agentsite.channel_layer import LayerUnavailable
from agentsite.db import db_async, rereading
from agentsite.db.prepared import Prepared
from traces.models import Step, Trace
from traces.record.live import trace_group, uuid_hex

ENDED = frozenset(s for s in Trace.Status.values if s not in Trace.ACTIVE)
QUIET_S = 1.0
# How long a request waiting for a turn's end trusts the end signal before it reads the trace.
END_WAIT_S = 5.0
# A stream quiet for this long (a turn waiting for an approval, a slow model) sends a comment
# line, so that proxies and clients do not take the connection for dead.
KEEPALIVE_S = 15.0
T = TypeVar("T")


class TurnTimeout(Exception):
    """The turn did not end within the time the caller waits."""


@Prepared
def _trace_read(trace_id: int) -> QuerySet[Trace]:
    last_answer = (Message.objects.filter(trace_id=OuterRef("pk"), role=Message.Role.ASSISTANT)
                   .order_by("-id").values("outcome")[:1])
    waits = Step.objects.filter(trace_id=OuterRef("pk"), kind=Step.Kind.APPROVAL,
                                status=Step.Status.WAITING)
    return (Trace.objects.select_related("conversation")
            .annotate(answer_outcome=Subquery(last_answer), approval_waits=Exists(waits))
            .filter(pk=trace_id))


@db_async
@rereading  # a request waiting for its turn outlives a dropped connection
def _trace(trace_id: int) -> Trace:
    """The trace as its end is told: with its conversation, the outcome of its last answer
    (``answer_outcome``) and whether a call of it waits for approval (``approval_waits``), in
    one query, compiled once per process (a request reads it at least twice)."""
    return _trace_read.get(trace_id)


# -- approvals ------------------------------------------------------------------------------------
def approval_payload(trace_uuid: Any, card: ToolCard) -> dict[str, Any]:
    """A call that waits for approval, as the API tells it (plain JSON values): its ``call_id``,
    ``tool`` and ``arguments`` (as stored: scrubbed of credentials, a very long one cut to its
    head), since when it waits and until when (then it is denied), and ``decide_url``, the path
    of ``POST /api/v1/traces/{trace}/approvals/{call_id}`` (None for a call id a URL cannot
    carry); the caller makes it absolute."""
    try:
        arguments = json.loads(card.arguments_json) if card.arguments_json else {}
    except ValueError:
        arguments = {"raw": card.arguments_json}
    if not isinstance(arguments, dict):
        arguments = {"value": arguments}
    since = card.waiting_since
    expires = since + timedelta(seconds=card.timeout_s) if since and card.timeout_s else None
    try:
        path = reverse("api:rest_approval_decide", args=[uuid_hex(trace_uuid), card.call_id])
    except NoReverseMatch:
        path = None
    return {"event": "approval", "trace": uuid_hex(trace_uuid), "call_id": card.call_id,
            "tool": card.name, "arguments": arguments,
            "waiting_since": since.isoformat() if since else None,
            "expires_at": expires.isoformat() if expires else None, "timeout_s": card.timeout_s,
            "decide_url": path}


def approvals_waiting(trace: Trace) -> list[dict[str, Any]]:
    """The calls of ``trace`` that wait for approval now, oldest first (``approval_payload``),
    read as the chat reads its tool cards, in one query."""
    steps, arguments = card_steps([trace.pk], arguments_chars=None)
    cards = tool_cards(steps, arguments, {trace.pk: trace.uuid})
    return [approval_payload(trace.uuid, card)
            for card in sorted(cards.values(), key=lambda c: c.seq) if card.state == "waiting"]


_approvals_read = db_async(rereading(approvals_waiting))


async def _approvals_new(trace: Trace, told: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """The waiting calls not yet in ``told`` (which takes them)."""
    new = []
    for payload in await _approvals_read(trace):
        key = (payload["call_id"], payload["waiting_since"] or "")
        if key not in told:
            told.add(key)
            new.append(payload)
    return new


def _asks_approval(payload: dict[str, Any]) -> bool:
    return (payload.get("event") == "step" and payload.get("kind") == Step.Kind.APPROVAL
            and payload.get("status") == Step.Status.WAITING)


class Listener:
    """A channel of the layer subscribed to one trace's group (``trace_listening``)."""

    def __init__(self, layer: Any, channel: str | None, group: str) -> None:
        self.layer, self.channel, self.group = layer, channel, group


@asynccontextmanager
async def trace_listening(trace_uuid: Any) -> AsyncIterator[Listener]:
    """Subscribed to the trace's announcements for the block: a caller that subscribes before
    it stores the trace misses nothing of it and need not read it first."""
    layer = get_channel_layer()
    group = trace_group(trace_uuid)
    channel = None
    if layer is not None:
        channel = await layer.new_channel()
        try:
            await layer.group_add(group, channel)
        except LayerUnavailable:  # Redis does not answer: follow the turn in the database
            layer = channel = None
    try:
        yield Listener(layer, channel, group)
    finally:
        if layer is not None:
            with contextlib.suppress(LayerUnavailable):
                await layer.group_discard(group, channel)


async def trace_events(trace: Trace, *, timeout_s: float,
                       listener: Listener | None = None) -> AsyncIterator[dict[str, Any]]:
    """The trace's live payloads (``delta``, ``step``, ``state``, ``trace``, and ``approval``
    for each call that waits for approval) until it ends; then one last
    ``{"event": "end", "trace": <Trace>}`` with the trace as stored. Raises
    ``TurnTimeout`` after ``timeout_s``. ``listener``: subscribed before ``trace`` was stored
    (then ``trace`` is taken as it is instead of being read first)."""
    if listener is None:
        async with trace_listening(trace.uuid) as listening:
            async with aclosing(_events(trace, timeout_s=timeout_s, listener=listening,
                                        fresh=False)) as events:
                async for payload in events:
                    yield payload
        return
    async with aclosing(_events(trace, timeout_s=timeout_s, listener=listener, fresh=True)) as events:
        async for payload in events:
            yield payload


async def _events(trace: Trace, *, timeout_s: float, listener: Listener,
                  fresh: bool) -> AsyncIterator[dict[str, Any]]:
    layer, channel = listener.layer, listener.channel
    deadline = time.monotonic() + timeout_s
    # The database says when the turn has ended; the layer only says it sooner.
    current = trace if fresh else await _trace(trace.pk)
    # The approvals told (call id, since when), and the event number they were last read at.
    told: set[tuple[str, str]] = set()
    checked_seq = -1
    if getattr(current, "approval_waits", False):  # a stream opened on a turn that waits
        checked_seq = current.event_seq
        for approval in await _approvals_new(current, told):
            yield approval
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
            # A wait the frames did not tell (a lost frame, no layer): read once per change.
            if current.approval_waits and current.event_seq != checked_seq:
                checked_seq = current.event_seq
                for approval in await _approvals_new(current, told):
                    yield approval
            continue
        yield payload
        if _asks_approval(payload):
            checked_seq = int(payload.get("seq") or checked_seq)
            for approval in await _approvals_new(trace, told):
                yield approval
        if payload.get("event") == "trace" and payload.get("status") in ENDED:
            current = await _trace(trace.pk)
    if current is trace:  # ended before anything was announced (the layer is absent)
        current = await _trace(trace.pk)
    yield {"event": "end", "trace": current}


async def turn_wait(trace: Trace, *, timeout_s: float, fresh: bool = False) -> Trace:
    """The trace once its turn has ended (``TurnTimeout`` after ``timeout_s``). It waits for
    the worker's end signal (``agents.turns.signals``: one blocking pop, none of the turn's
    live events), and reads the database when it comes, and every ``END_WAIT_S`` in case it
    was lost. ``fresh``: ``trace`` was just stored (it is not read first)."""
    deadline = time.monotonic() + timeout_s
    current = trace if fresh else await _trace(trace.pk)
    while current.status not in ENDED:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TurnTimeout(f"The turn did not end within {timeout_s:g} s.")
        await ended_signal_wait(trace_uuid=trace.uuid, timeout_s=min(END_WAIT_S, left))
        current = await _trace(trace.pk)
    return current


async def with_keepalive(source: AsyncIterator[T], *, every_s: float | None = None
                         ) -> AsyncIterator[T | None]:
    """``source``'s items, and ``None`` whenever it has been quiet for ``every_s`` (by default
    ``KEEPALIVE_S``; the caller writes a comment line). Closing this closes ``source``."""
    every_s = every_s or KEEPALIVE_S
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield None
                continue
            finished, pending = pending, None
            try:
                item = finished.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.wait({pending})
            if not pending.cancelled():
                pending.exception()  # retrieved: the stream is closing either way
        await source.aclose()
