"""Live announcements of what a turn does, on the channel layer.

The database is the truth and these are notifications: every persisted change carries the
trace's event sequence number ``seq`` so that a client which sees a gap, reconnects, or opens a
running trace late asks the server for everything after the last number it holds. Token deltas
are not persisted; they carry the current ``seq`` and their own ``index`` within the model step.

A turn announces data, never HTML: which row changed (its trace, step number or iteration), its
status and its event number. Nothing is rendered for a trace nobody watches. A page's socket
renders what it shows when the event reaches it (``inspector_payload``, in the web process, from
the record), from the same ``{% partialdef %}`` partials the page uses, so a row that arrives
live and a row rendered on reload are the same HTML.

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

from ..models import Trace
from .presentation import decorate_states, decorate_steps

logger = logging.getLogger(__name__)

EVENT_TYPE = "live.event"  # handled by the consumers' ``live_event``
# What a trace is loaded with to render its fragments without a query per row.
LIVE_RELATED = ("conversation", "agent", "user", "team", "user_message", "api_key")


def trace_group(trace_uuid: Any) -> str:
    return f"trace_{uuid_hex(trace_uuid)}"


def conversation_group(conversation_uuid: Any) -> str:
    return f"conversation_{uuid_hex(conversation_uuid)}"


def uuid_hex(value: Any) -> str:
    """A UUID (or its text) as 32 hex digits, the form group names and URLs use."""
    return value.hex if hasattr(value, "hex") else str(value).replace("-", "").lower()


def render(partial: str, context: dict[str, Any]) -> str:
    return render_to_string(partial, context)


# -- events: what a turn announces (plain dicts, no HTML, no query) ---------------------------------
def step_event(step: Any) -> dict[str, Any]:
    """A step was recorded or changed. A restart of a streamed answer also names the model
    request whose streamed text is void (``restarted_step``) and says why (``notice``)."""
    payload = {
        "event": "step",
        "trace": step.trace.uuid.hex,
        "seq": step.event_seq,
        "id": f"step-{step.seq}",
        "step": step.seq,
        "status": step.status,
        "kind": step.kind,
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


def state_event(state: Any) -> dict[str, Any]:
    """The trajectory state of an iteration was recorded."""
    return {"event": "state", "trace": state.trace.uuid.hex, "seq": state.event_seq,
            "id": f"state-{state.iteration}", "iteration": state.iteration}


def trace_event(trace: Any) -> dict[str, Any]:
    """The trace's status or totals changed."""
    return {
        "event": "trace",
        "trace": trace.uuid.hex,
        "seq": trace.event_seq,
        "id": "trace-header",
        "status": trace.status,
        # The cost so far, for meters outside the inspector (the chat): bumped as each model
        # request finishes.
        "totals": trace_totals(trace),
    }


# -- payloads: what the inspector's page receives (the event with its row's HTML) ----------------
def step_payload(step: Any) -> dict[str, Any]:
    """The inspector's row for ``step``, with its event's data."""
    if not hasattr(step, "bar_x"):
        # The client rescales every bar to the trace's current length; this is a first guess.
        decorate_steps([step], scale=step.offset_ms + (step.duration_ms or 0) or 1.0)
    html = render("traces/trace_detail.html#step-row", {"step": step, "trace": step.trace, "live": True})
    return {**step_event(step), "html": html}


def state_payload(state: Any) -> dict[str, Any]:
    if not hasattr(state, "diff"):
        decorate_states([state], trace=state.trace)
    html = render("traces/trace_detail.html#state-row", {"state": state, "trace": state.trace})
    return {**state_event(state), "html": html}


def trace_payload(trace: Any) -> dict[str, Any]:
    return {**trace_event(trace),
            "html": render("traces/trace_detail.html#trace-header", {"trace": trace})}


# The events whose rows a page shows as HTML.
RENDERED = frozenset({"step", "state", "trace"})


def inspector_payload(event: dict[str, Any]) -> dict[str, Any]:
    """An announced event as the inspector's socket sends it: with the HTML of its row, read
    from the record now (a later state of the row than the event's is fine: the page keeps the
    highest event number it has seen). The event unchanged when its row is gone or it carries
    none (text deltas)."""
    kind = event.get("event")
    if kind not in RENDERED:
        return event
    trace = Trace.objects.select_related(*LIVE_RELATED).filter(uuid=event.get("trace")).first()
    if trace is None:
        return event
    if kind == "trace":
        return {**trace_payload(trace), "seq": max(int(event.get("seq") or 0), trace.event_seq)}
    if kind == "step":
        row = trace.steps.filter(seq=event.get("step")).first()
    else:
        row = trace.trajectory_states.filter(iteration=event.get("iteration")).first()
    if row is None:
        return event
    row.trace = trace
    payload = step_payload(row) if kind == "step" else state_payload(row)
    return {**event, **payload, "seq": event.get("seq", payload["seq"])}


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


# What each announcement sends: plain data built from the objects in hand, without a query, so
# a running turn builds them in its event loop and sends them with ``publish``
# (``traces.record.recorder``); ``announce_sync`` does both from synchronous code.
Announcement = tuple[list[str], dict[str, Any]]
Prepare = Callable[[Any], Announcement]


@dataclass(frozen=True)
class Announcements:
    """What a turn announces, one function per kind of change: each turns its object into
    (groups, event). ``groups`` names where a trace's text deltas go. The inspector's own are
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
    return _inspector_groups(step.trace), step_event(step)


def state_announcement(state: Any) -> Announcement:
    return _inspector_groups(state.trace), state_event(state)


def trace_announcement(trace: Any) -> Announcement:
    return _inspector_groups(trace), trace_event(trace)


INSPECTOR = Announcements(step=step_announcement, state=state_announcement,
                          trace=trace_announcement, message=None, groups=_inspector_groups)


def announce_sync(prepare: Prepare | None, obj: Any) -> None:
    """Announce from synchronous code (web requests, the reaper). Never raises."""
    if prepare is None:
        return
    try:
        groups, payload = prepare(obj)
        async_to_sync(publish)(groups, payload)
    except Exception:  # noqa: BLE001 - the database has the truth; clients re-sync
        logger.warning("could not announce %s", getattr(prepare, "__name__", prepare),
                       exc_info=True)
