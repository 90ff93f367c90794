"""Live announcements of what a turn does, on the channel layer.

The database is the truth and these are notifications: every persisted change carries the
trace's event sequence number ``seq`` so that a client which sees a gap, reconnects, or opens a
running trace late asks the server for everything after the last number it holds. Token deltas
are not persisted; they carry the current ``seq`` and their own ``index`` within the model step.

Fragments are rendered from the same ``{% partialdef %}`` partials the pages use, so a row that
arrives live and a row rendered on reload are the same HTML.

Groups: ``trace_<hex>`` (the inspector) and ``conversation_<hex>`` (the chat). This module
knows the inspector only; what the chat adds to an announcement comes from the chat, handed to
the recorder as ``Announcements`` by whoever runs the turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.template.loader import render_to_string

from .presentation import decorate_states, decorate_steps

logger = logging.getLogger(__name__)

EVENT_TYPE = "live.event"  # handled by the consumers' ``live_event``


def trace_group(trace_uuid: Any) -> str:
    return f"trace_{uuid_hex(trace_uuid)}"


def conversation_group(conversation_uuid: Any) -> str:
    return f"conversation_{uuid_hex(conversation_uuid)}"


def uuid_hex(value: Any) -> str:
    """A UUID (or its text) as 32 hex digits, the form group names and URLs use."""
    return value.hex if hasattr(value, "hex") else str(value).replace("-", "").lower()


def render(partial: str, context: dict[str, Any]) -> str:
    return render_to_string(partial, context)


# -- payloads (plain dicts: the consumers forward them as JSON) ----------------------------------
def step_payload(step: Any) -> dict[str, Any]:
    """The inspector's row for ``step``. A restart of a streamed answer also names the model
    request whose streamed text is void (``restarted_step``) and says why (``notice``)."""
    if not hasattr(step, "bar_x"):
        # The client rescales every bar to the trace's current length; this is a first guess.
        decorate_steps([step], scale=step.offset_ms + (step.duration_ms or 0) or 1.0)
    payload = {
        "event": "step",
        "trace": step.trace.uuid.hex,
        "seq": step.event_seq,
        "id": f"step-{step.seq}",
        "step": step.seq,
        "status": step.status,
        "html": render("traces/trace_detail.html#step-row", {"step": step, "trace": step.trace, "live": True}),
    }
    meta = step.meta if isinstance(step.meta, dict) else {}
    if step.kind == "retry" and meta.get("restart"):
        payload["restarted_step"] = meta.get("restarted_step")
        payload["notice"] = step.error
    elif meta.get("aborted"):
        # Cut off by a worker that stopped: the turn resumes and asks again, so the text this
        # request streamed is void, as after a restart.
        payload["restarted_step"] = step.seq
        payload["notice"] = RESUMED_NOTICE
    return payload


RESUMED_NOTICE = ("The worker writing this answer stopped. The turn continues from its last "
                  "recorded step; the answer starts over.")


def state_payload(state: Any) -> dict[str, Any]:
    if not hasattr(state, "diff"):
        decorate_states([state], trace=state.trace)
    return {
        "event": "state",
        "trace": state.trace.uuid.hex,
        "seq": state.event_seq,
        "id": f"state-{state.iteration}",
        "html": render("traces/trace_detail.html#state-row", {"state": state, "trace": state.trace}),
    }


def trace_payload(trace: Any) -> dict[str, Any]:
    return {
        "event": "trace",
        "trace": trace.uuid.hex,
        "seq": trace.event_seq,
        "id": "trace-header",
        "status": trace.status,
        # The cost so far, for meters outside the inspector (the chat): bumped as each model
        # request finishes.
        "totals": trace_totals(trace),
        "html": render("traces/trace_detail.html#trace-header", {"trace": trace}),
    }


def trace_totals(trace: Any) -> dict[str, Any]:
    return {
        "cost_usd": str(trace.cost_usd),
        "input_tokens": trace.input_tokens, "output_tokens": trace.output_tokens,
        "cache_write_tokens": trace.cache_write_tokens, "cache_read_tokens": trace.cache_read_tokens,
        "reasoning_tokens": trace.reasoning_tokens, "total_tokens": trace.total_tokens,
        "unpriced_calls": getattr(trace, "unpriced_calls", 0),
        "prefix_priced_calls": getattr(trace, "prefix_priced_calls", 0),
        "estimated_calls": getattr(trace, "estimated_calls", 0),
    }


def delta_payload(*, trace_uuid: Any, seq: int, step: int, index: int, text: str,
                  offset: int = 0) -> dict[str, Any]:
    """A frame of streamed text; ``offset``: how many characters of the step's text came before."""
    return {"event": "delta", "trace": uuid_hex(trace_uuid), "seq": seq, "step": step, "index": index,
            "offset": offset, "text": text}


# -- sending ------------------------------------------------------------------------------------
async def publish(groups: list[str], payload: dict[str, Any]) -> None:
    """Send ``payload`` to ``groups``; a failure is logged, never raised (the DB has the truth)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": EVENT_TYPE, "payload": payload}
    for group in groups:
        try:
            await layer.group_send(group, message)
        except Exception:  # noqa: BLE001 - notifications must never break a turn
            logger.warning("could not announce %s to %s", payload.get("event"), group, exc_info=True)


# What each announcement sends, rendered synchronously: templates may read related rows, and
# the ORM refuses to run inside an event loop. A running turn renders these on its database
# thread and sends them with ``publish`` (``traces.recorder``); ``announce_sync`` does both
# from synchronous code.
Announcement = tuple[list[str], dict[str, Any]]
Prepare = Callable[[Any], Announcement]


@dataclass(frozen=True)
class Announcements:
    """What a turn announces, one function per kind of change: each renders its object into
    (groups, payload). ``groups`` names where a trace's text deltas go. The inspector's own are
    ``INSPECTOR``; the chat builds its own on top of them and the turn's runner hands those to
    the recorder, so this app never reaches up into the chat."""

    step: Prepare
    state: Prepare
    trace: Prepare
    message: Prepare | None
    groups: Callable[[Any], list[str]]


def _inspector_groups(trace: Any) -> list[str]:
    return [trace_group(trace.uuid)]


def step_announcement(step: Any) -> Announcement:
    return _inspector_groups(step.trace), step_payload(step)


def state_announcement(state: Any) -> Announcement:
    return _inspector_groups(state.trace), state_payload(state)


def trace_announcement(trace: Any) -> Announcement:
    return _inspector_groups(trace), trace_payload(trace)


INSPECTOR = Announcements(step=step_announcement, state=state_announcement,
                          trace=trace_announcement, message=None, groups=_inspector_groups)


def announce_sync(prepare: Prepare | None, obj: Any) -> None:
    """Announce from synchronous code (web requests, the reaper): render here, where queries
    are allowed, then send. Never raises."""
    if prepare is None:
        return
    try:
        groups, payload = prepare(obj)
        async_to_sync(publish)(groups, payload)
    except Exception:  # noqa: BLE001 - the database has the truth; clients re-sync
        logger.warning("could not announce %s", getattr(prepare, "__name__", prepare),
                       exc_info=True)
