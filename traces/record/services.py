"""State changes of one trace's record: heartbeat, configuration, steps and trajectory states,
steps cut off when a turn ends. A turn's life around them (claim, close, cancel, dispatch,
reap) belongs to the turns (``agents.turns.lifecycle``, ``agents.turns.reaper``).

Every change that a live client can see bumps ``Trace.event_seq`` by one, and the row it touched
stores the new number (``traces.models``). Changes a worker makes are conditional on the trace
still being its own: ``status == running`` and ``attempts`` equal to the attempt it claimed. A
worker whose trace was reaped, or claimed again after a resumption, therefore cannot overwrite
what happened since; its writes raise ``TraceNotOwned`` and it stops.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from agents.runtime.pricing import TOKEN_FIELDS
from agentsite.db.returning import insert, save_fields, update_returning, upsert

from ..costs import rollups
from ..export import pipeline as export_pipeline
from ..models import Step, StepPayload, Trace, TrajectoryState
from .live import LIVE_RELATED

logger = logging.getLogger(__name__)
Status = Trace.Status

# A step's payload is one per kind: stored anew, or replaced.
PAYLOAD_KEY, PAYLOAD_VALUES = ("step", "kind"), ("content", "content_type", "size")
# Step columns a recorder may write (the rest belong to the row's creation).
STEP_FIELDS = frozenset({
    "kind", "name", "iteration", "status", "success", "duration_ms", "error", "provider",
    "model", "call_id", "cost_usd", "price_id", "price_match", "meta", *TOKEN_FIELDS,
})


class TraceNotOwned(Exception):  # noqa: N818 - a state, not a programming error
    """The trace is no longer the caller's to write: reaped, cancelled, or claimed again."""


# -- helpers ------------------------------------------------------------------------------------
def trace_owned(trace_id: int, attempt: int) -> QuerySet[Trace]:
    return Trace.objects.filter(**owned_where(trace_id, attempt))


def owned_where(trace_id: int, attempt: int | None) -> dict[str, Any]:
    """The filter of ``trace_owned`` (without ``attempt``: the trace, whoever runs it)."""
    if attempt is None:
        return {"pk": trace_id}
    return {"pk": trace_id, "status": Status.RUNNING, "attempts": attempt}


def event_bump(trace_id: int, attempt: int | None = None, *, events: int = 1,
               new_steps: int = 0, fields: Mapping[str, Any] | None = None) -> int:
    """The trace's next event number (``events`` numbers taken: the last is returned), in the
    statement that writes ``fields`` to the trace. With ``attempt``, only while that attempt
    owns it; ``new_steps`` adds to its step count. One statement (``UPDATE ... RETURNING``):
    the hottest write of a turn. Call inside a transaction: the row stays locked until it
    commits."""
    changes: dict[str, Any] = {**(fields or {}), "event_seq": F("event_seq") + events}
    if new_steps:
        changes["step_count"] = F("step_count") + new_steps
    row = update_returning(Trace, owned_where(trace_id, attempt), changes, ["event_seq"])
    if row is None:
        raise TraceNotOwned(f"trace {trace_id} is no longer owned by attempt {attempt}")
    return int(row["event_seq"])


def reason_sentence(reason: str) -> str:
    """A cancel reason ("Cancelled by alice", "interrupted by a new message") as the sentence
    shown as the trace's error."""
    text = (reason or "").strip() or "Cancelled"
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def trace_for_live(trace_id: int) -> Trace:
    """The trace with what announcements render, so they need no query of their own."""
    return Trace.objects.select_related(*LIVE_RELATED).get(pk=trace_id)


def step_totals(trace_id: int) -> dict[str, Any]:
    return rollups.trace_totals_from_steps(trace_id)


def duration_ms(started: datetime | None, now: datetime) -> int | None:
    return max(int((now - started).total_seconds() * 1000), 0) if started else None


# -- the worker's side --------------------------------------------------------------------------
@dataclass(frozen=True)
class Heartbeat:
    owned: bool
    cancel_reason: str | None = None


def trace_heartbeat(*, trace_id: int, attempt: int, now: datetime | None = None) -> Heartbeat:
    """Renew the heartbeat; also reports a cancel request (the fallback to the Redis signal)."""
    if not trace_owned(trace_id, attempt).update(heartbeat_at=now or timezone.now()):
        return Heartbeat(owned=False)
    row = Trace.objects.filter(pk=trace_id).values("cancel_requested_at", "cancel_reason").get()
    if row["cancel_requested_at"] is None:
        return Heartbeat(owned=True)
    return Heartbeat(owned=True, cancel_reason=row["cancel_reason"] or "Cancelled by user.")


def trace_configure(*, trace_id: int, attempt: int, routing: dict[str, Any], provider_name: str,
                    provider_kind: str, model: str, warnings: list[str],
                    agent_version: int | None = None,
                    meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record how the turn was set up: the routing decision, provider and model, warnings, and
    the agent's configuration version it runs with. ``meta``: the trace's meta as the caller
    read it at its claim (read here otherwise). Returns the fields written, with the trace's
    new ``event_seq``."""
    with transaction.atomic():
        if meta is None:
            meta = Trace.objects.filter(pk=trace_id).values_list("meta", flat=True).get()
        meta = dict(meta or {})
        if warnings:
            meta["warnings"] = list(warnings)
        fields: dict[str, Any] = {"routing": routing, "provider_name": provider_name[:100],
                                  "provider_kind": provider_kind[:16], "model": model[:200],
                                  "meta": meta}
        if agent_version is not None:
            fields["agent_version"] = agent_version
        event_seq = event_bump(trace_id, attempt, fields=fields)
    return {**fields, "event_seq": event_seq}


def trace_budget_note(*, trace_id: int, attempt: int, note: dict[str, Any],
                      route: Mapping[str, str] | None = None) -> Trace:
    """Record what a budget decided during the turn in ``routing["budget"]`` (a warning, a
    route down, a block). A route down also names the provider and model the rest of the turn
    uses, so "Why this model" shows the model that answered and why."""
    with transaction.atomic():
        event_bump(trace_id, attempt)
        routing = Trace.objects.filter(pk=trace_id).values_list("routing", flat=True).get() or {}
        budget = dict(routing.get("budget") or {}) if isinstance(routing, dict) else {}
        budget.update(note)
        routing = {**(routing if isinstance(routing, dict) else {}), "budget": budget}
        updates: dict[str, Any] = {"routing": routing}
        if route:
            updates.update(provider_name=route["provider_name"][:100],
                           provider_kind=route["provider_kind"][:16], model=route["model"][:200])
        Trace.objects.filter(pk=trace_id).update(**updates)
    return trace_for_live(trace_id)


Payloads = Mapping[str, tuple[str, str]]  # kind -> (content, content type)


def _unchanged(step: Step, values: Mapping[str, Any], payloads: Payloads) -> bool:
    # Decimals compare by value (0E-10 == 0); meta compares as the JSON it round-trips to.
    if any(getattr(step, name) != value for name, value in values.items()):
        return False
    if not payloads:
        return True
    stored = dict(step.payloads.filter(kind__in=list(payloads)).values_list("kind", "content"))
    return all(stored.get(kind) == content for kind, (content, _) in payloads.items())


def _goes_back(step: Step, values: Mapping[str, Any]) -> bool:
    """A finished step never becomes running or waiting again: that write is a stale replay."""
    finished = (Step.Status.OK, Step.Status.ERROR)
    return step.status in finished and values.get("status", step.status) not in finished


def step_record(*, trace_id: int, attempt: int, seq: int, values: Mapping[str, Any],
                payloads: Payloads | None = None, started_at: datetime | None = None,
                offset_ms: int = 0, new: bool = False, known: KnownStep | None = None,
                moved: tuple[datetime, int] | None = None) -> Step | None:
    """Create or update step ``seq`` of the trace. Idempotent: writing what the row already
    holds, or moving a finished step back to running, is a no-op and returns None (no event).
    ``started_at``/``offset_ms`` are kept from the row's creation, unless ``moved`` gives the
    step a later start (a tool call that ran once a person had approved it). Raises ``TraceNotOwned`` when
    the attempt no longer owns the trace. ``new``: the caller knows the step is not stored yet
    (it is not looked for); ``known``: the caller wrote the stored row itself and knows it (it
    is not read again).

    A finished model request changes what the trace has cost: its totals and the cost
    roll-ups move in the same transaction (``traces.costs.rollups``), as a second event; the
    returned step's ``totals_seq`` is that event's number (0 when the totals did not move) and
    its ``totals`` the trace's totals after it (None then)."""
    unknown = set(values) - STEP_FIELDS
    if unknown:
        raise ValueError(f"not step fields: {sorted(unknown)}")
    record = functools.partial(_step_record, trace_id=trace_id, attempt=attempt, seq=seq,
                               values=values, payloads=payloads or {}, started_at=started_at,
                               offset_ms=offset_ms, moved=moved)
    if known is not None:
        return record(new=False, known=known)
    if not new:
        return record(new=False)
    try:
        return record(new=True)
    except IntegrityError:  # stored after all (a run the caller did not know of): update it
        return record(new=False)


@dataclass(frozen=True)
class KnownStep:
    """A step as its writer stored it: its row id, when it started and the values written."""

    id: int
    started_at: datetime
    offset_ms: int
    values: Mapping[str, Any]

    def step(self, trace_id: int, seq: int) -> Step:
        step = Step(pk=self.id, trace_id=trace_id, seq=seq, started_at=self.started_at,
                    offset_ms=self.offset_ms, **self.values)
        step._state.adding = False
        return step


def _step_record(*, trace_id: int, attempt: int, seq: int, values: Mapping[str, Any],
                 payloads: Payloads, started_at: datetime | None, offset_ms: int,
                 new: bool, known: KnownStep | None = None,
                 moved: tuple[datetime, int] | None = None) -> Step | None:
    with transaction.atomic():
        if known is not None:
            step = known.step(trace_id, seq)
        else:
            step = None if new else Step.objects.filter(trace_id=trace_id, seq=seq).first()
        if step is not None and (_unchanged(step, values, payloads) or _goes_back(step, values)):
            return None
        created = step is None
        before = rollups.step_share(step) if step is not None else None
        was_open = created or step.status in (Step.Status.RUNNING, Step.Status.WAITING)
        if step is None:
            step = Step(trace_id=trace_id, seq=seq, started_at=started_at or timezone.now(),
                        offset_ms=max(int(offset_ms), 0))
        changed = [name for name, value in values.items() if created or getattr(step, name) != value]
        for name in changed:
            setattr(step, name, values[name])
        if moved is not None and not created:
            step.started_at, step.offset_ms = moved[0], max(int(moved[1]), 0)
            changed += ["started_at", "offset_ms"]
        moves = rollups.differences(before, rollups.step_share(step))
        # One event for the step, a second when the trace's totals move (the header's cost and
        # the chat's meter follow live); a new step also counts in the header's "Steps" as the
        # timeline grows, not only when the turn ends.
        step.totals_seq, step.totals = 0, None
        if moves:
            try:
                last, step.totals = rollups.moves_apply(trace_id=trace_id, attempt=attempt, moves=moves,
                                                        new_steps=int(created))
            except LookupError as exc:
                raise TraceNotOwned(str(exc)) from exc
            step.event_seq, step.totals_seq = (last - 1, last) if step.totals is not None else (last, 0)
        else:
            step.event_seq = event_bump(trace_id, attempt, new_steps=int(created))
        if created:
            insert(step)
        else:
            save_fields(step, [*changed, "event_seq"])  # only what moved
        made = [StepPayload(step=step, kind=kind, content=content, content_type=content_type,
                            size=len(content.encode()))
                for kind, (content, content_type) in payloads.items()]
        if created and len(made) == 1:
            insert(made[0])
        elif created:
            StepPayload.objects.bulk_create(made)
        elif len(made) == 1:
            upsert(made[0], unique=PAYLOAD_KEY, update=PAYLOAD_VALUES)
        elif made:
            StepPayload.objects.bulk_create(made, update_conflicts=True, unique_fields=PAYLOAD_KEY,
                                            update_fields=PAYLOAD_VALUES)
        if was_open and step.status in (Step.Status.OK, Step.Status.ERROR):
            # Its span leaves once the step is committed (traces.export), off this thread.
            transaction.on_commit(functools.partial(export_pipeline.step_finished, trace_id, seq))
    return step


def step_payload_put(*, trace_id: int, seq: int, kind: str, content: str, content_type: str,
                     step_id: int | None = None) -> bool:
    """Store (or replace) one payload of step ``seq`` (whose id is ``step_id``, when the caller
    knows it) without changing the step: no event, as nobody watches it live (the answer as it
    went into the history, which a resumed turn continues from). False when the step is not
    stored."""
    if step_id is None:
        step_id = Step.objects.filter(trace_id=trace_id, seq=seq).values_list("pk", flat=True).first()
    if step_id is None:
        return False
    upsert(StepPayload(step_id=step_id, kind=kind, content=content, content_type=content_type,
                       size=len(content.encode())), unique=PAYLOAD_KEY, update=PAYLOAD_VALUES)
    return True


def state_record(*, trace_id: int, attempt: int, iteration: int, fields: dict[str, Any],
                 changed: list[str], new: bool = False) -> TrajectoryState | None:
    """Create or update the trajectory state of one iteration; idempotent like ``step_record``
    (``new``: the caller knows it is not stored yet)."""
    if new:
        try:
            return _state_record(trace_id=trace_id, attempt=attempt, iteration=iteration,
                                 fields=fields, changed=changed, new=True)
        except IntegrityError:  # stored after all: update it
            pass
    return _state_record(trace_id=trace_id, attempt=attempt, iteration=iteration, fields=fields,
                         changed=changed, new=False)


def _state_record(*, trace_id: int, attempt: int, iteration: int, fields: dict[str, Any],
                  changed: list[str], new: bool) -> TrajectoryState | None:
    with transaction.atomic():
        state = None if new else TrajectoryState.objects.filter(trace_id=trace_id, iteration=iteration).first()
        if state is not None and state.fields == fields and state.changed == changed:
            return None
        event_seq = event_bump(trace_id, attempt)
        if state is None:
            state = TrajectoryState(trace_id=trace_id, iteration=iteration)
        state.fields, state.changed, state.event_seq = fields, changed, event_seq
        state.save()
    return state


@dataclass(frozen=True)
class StoredSteps:
    """What a trace holds already, for a recorder that continues it: its keyed steps (by the
    recorder's event key: their ``seq`` and the values a recorder writes) and its highest
    step number, keyed or not."""

    keyed: dict[str, tuple[int, dict[str, Any]]]
    last_seq: int


def step_keys(*, trace_id: int) -> StoredSteps:
    """The steps already stored for the trace (so a replayed run merges onto what is there)."""
    names = sorted(STEP_FIELDS)
    found, last = {}, 0
    for row in Step.objects.filter(trace_id=trace_id).values("seq", *names):
        last = max(last, row["seq"])
        meta = row["meta"] if isinstance(row["meta"], dict) else {}
        if meta.get("key"):
            found[str(meta["key"])] = (row["seq"], {name: row[name] for name in names})
    return StoredSteps(found, last)


def step_partial_save(*, trace_id: int, seq: int, text: str) -> None:
    """Keep what a model request has streamed so far with its step (empty: forget it). Not an
    event: nobody watches it live; it is what a resumed turn records of a cut-off request."""
    step_id = Step.objects.filter(trace_id=trace_id, seq=seq).values_list("pk", flat=True).first()
    if step_id is None:
        return
    if not text:
        StepPayload.objects.filter(step_id=step_id, kind=StepPayload.Kind.PARTIAL).delete()
        return
    StepPayload.objects.update_or_create(
        step_id=step_id, kind=StepPayload.Kind.PARTIAL,
        defaults={"content": text, "content_type": "text/plain", "size": len(text.encode())})


STEP_INTERRUPTED = "Interrupted: the turn ended before this step finished."


def steps_interrupt(*, trace_id: int) -> list[int]:
    """End the trace's running and waiting steps as errors (the turn ended under them); the ids
    of the steps changed. Call inside the transaction that ends the trace."""
    changed = []
    for step in Step.objects.filter(trace_id=trace_id,
                                    status__in=[Step.Status.RUNNING, Step.Status.WAITING]):
        before = rollups.step_share(step)
        step.status, step.success = Step.Status.ERROR, False
        step.error = step.error or STEP_INTERRUPTED
        step.event_seq = event_bump(trace_id)
        save_fields(step, ["status", "success", "error", "event_seq"])
        # An interrupted model request still counts as a call in the ledger (at its cost).
        rollups.share_moved(trace_id=trace_id, before=before, after=rollups.step_share(step),
                            bump=False)
        changed.append(step.pk)
        transaction.on_commit(functools.partial(export_pipeline.step_finished, trace_id, step.seq))
    return changed
