"""How a recorder writes a turn's rows and announces them: the half of ``TraceRecorder`` that
knows nothing of the runtime's events.

A step is addressed by a *key* (``llm:<iteration>:<n>``, ``tool:<iteration>:<call id>``, ...)
that maps to a stable ``seq`` and is stored in the step's ``meta``. ``StepWriter._write`` merges
what an event changes into the step's values, writes them on the turn's database thread through
``traces.record.services`` and announces the row; the same key written again — twice by one
recorder, or by a second run of the same turn — lands on the same row, and an unchanged row is
not written or announced again. An attempt that loses the trace (reaped, claimed again) writes
nothing more.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from django.utils import timezone

from agents.runtime.events import TrajectoryStateRecorded

from ..models import Step, Trace
from . import live, services

logger = logging.getLogger(__name__)

DbCall = Callable[..., Awaitable[Any]]
StepStatus = Step.Status


class StepWriter:
    """Writes the steps and trajectory states of one attempt at one trace, each once, and
    announces them. ``db(fn, **kwargs)`` runs ``fn`` on the turn's database thread. When the
    attempt loses the trace every later write is dropped and ``on_lost`` is called once."""

    def __init__(self, *, trace: Trace, attempt: int, db: DbCall,
                 on_lost: Callable[[], None] | None = None,
                 announcements: live.Announcements = live.INSPECTOR) -> None:
        self.trace = trace
        # What each change announces and to whom: the inspector's, or the caller's (the chat
        # adds its fragments) — passed in, so this app never imports the chat.
        self.announcements = announcements
        self.attempt = attempt
        self.db = db
        self.on_lost = on_lost
        self.lost = False
        self.keys: dict[str, int] = {}
        self.last_seq = 0
        # The highest step number stored before this run: a step past it is new (not looked for).
        self.stored_upto = 0
        self.step_ids: dict[int, int] = {}  # seq -> the step's row id, once written
        # A trace whose first run this is holds no steps or states of earlier runs.
        self.fresh = True
        self.states_written: set[int] = set()
        self.step_starts: dict[int, tuple[datetime, int]] = {}  # seq -> its start, as stored
        self.values: dict[int, dict[str, Any]] = {}

    async def start(self) -> None:
        """Load the steps a previous run of this trace stored, so its events land on them (a
        trace without steps, the first run of a turn, has none to load)."""
        if self.needs_stored():
            self.use_stored(await self.db(services.step_keys, trace_id=self.trace.pk))

    def needs_stored(self) -> bool:
        """Whether the trace may hold steps already (``start`` reads them, or the caller passes
        them to ``use_stored`` from ``services.step_keys``)."""
        return bool(self.trace.step_count or self.attempt > 1 or self.trace.forked_from_id)

    def use_stored(self, steps: services.StoredSteps) -> None:
        self.fresh = False
        stored, self.stored_upto = steps.keyed, steps.last_seq
        self.keys = {key: seq for key, (seq, _) in stored.items()}
        self.values = {seq: values for seq, values in stored.values()}
        self.last_seq = max(self.keys.values(), default=0)

    # -- steps ------------------------------------------------------------------------------------
    def _seq(self, key: str) -> int:
        seq = self.keys.get(key)
        if seq is None:
            self.last_seq += 1
            seq = self.keys[key] = self.last_seq
        return seq

    def _offset_ms(self, now: datetime) -> int:
        started = self.trace.started_at
        return max(int((now - started).total_seconds() * 1000), 0) if started else 0

    async def _write(self, key: str, updates: dict[str, Any],
                     payloads: dict[str, tuple[str, str]] | None = None, *,
                     moved: datetime | None = None) -> int:
        """Write step ``key``'s ``updates`` (and ``payloads``); ``moved``: its new start (a tool
        call that ran once a person approved it)."""
        seq = self._seq(key)
        new = seq not in self.values and seq > self.stored_upto
        previous = self.values.get(seq, {})
        # A step this recorder wrote is not read back: it knows the row.
        known = (services.KnownStep(self.step_ids[seq], *self.step_starts[seq], previous)
                 if seq in self.step_ids and seq in self.step_starts else None)
        values = {**previous, **updates,
                  "meta": {**previous.get("meta", {}), **updates.get("meta", {}), "key": key}}
        self.values[seq] = values
        if self.lost:
            return seq
        now = timezone.now()
        try:
            step = await self.db(services.step_record, trace_id=self.trace.pk,
                                 attempt=self.attempt, seq=seq, values=values,
                                 payloads=payloads, started_at=now,
                                 offset_ms=self._offset_ms(now), new=new, known=known,
                                 moved=(moved, self._offset_ms(moved)) if moved is not None else None)
        except services.TraceNotOwned:
            self.lose()
            return seq
        if step is None:
            # Nothing written (a replay, or a finished step told it runs again): the row is
            # still what this recorder last wrote.
            if previous:
                self.values[seq] = previous
        else:
            if new:
                self.trace.step_count += 1
            self.step_ids[seq] = step.pk
            if moved is not None:
                self.step_starts[seq] = (step.started_at, step.offset_ms)
            self.step_starts.setdefault(seq, (step.started_at, step.offset_ms))
            self.trace.event_seq = max(self.trace.event_seq, step.event_seq)
            step.trace = self.trace
            await self.announce(self.announcements.step, step)
            if step.totals_seq:
                # The trace's cost so far moved: its header (and the chat's meter) follow live.
                for name, value in (step.totals or {}).items():
                    setattr(self.trace, name, value)
                self.trace.event_seq = max(self.trace.event_seq, step.totals_seq)
                await self.announce(self.announcements.trace, self.trace)
        return seq

    def has_open_steps(self) -> bool:
        """Whether a step this recorder wrote was left running or waiting (the turn ended
        under it)."""
        return any(v.get("status") in (StepStatus.RUNNING, StepStatus.WAITING)
                   for v in self.values.values())

    def detach(self) -> None:
        """Record nothing more, without taking the trace as lost: the runner is handing the
        turn back (its worker is stopping), and another worker continues from what is recorded."""
        self.lost = True

    def lose(self) -> None:
        if self.lost:
            return
        self.lost = True
        logger.warning("trace %s was taken from attempt %s; its events are dropped",
                       self.trace.pk, self.attempt)
        if self.on_lost is not None:
            self.on_lost()

    # -- trajectory states and announcements --------------------------------------------------------
    async def _state(self, event: TrajectoryStateRecorded) -> None:
        if self.lost:
            return
        try:
            state = await self.db(services.state_record, trace_id=self.trace.pk,
                                  attempt=self.attempt, iteration=event.iteration,
                                  fields=json.loads(json.dumps(event.state, default=str)),
                                  changed=list(event.changed),
                                  new=self.fresh and event.iteration not in self.states_written)
        except services.TraceNotOwned:
            self.lose()
            return
        self.states_written.add(event.iteration)
        if state is not None:
            self.trace.event_seq = max(self.trace.event_seq, state.event_seq)
            state.trace = self.trace
            await self.announce(self.announcements.state, state)

    async def announce(self, prepare: Callable[[Any], live.Announcement], obj: Any) -> None:
        """Send what ``prepare`` makes of ``obj`` (data from the objects in hand: no query, no
        rendering). A failure (a full channel, Redis away) never stops a turn."""
        try:
            groups, payload = prepare(obj)
            await live.publish(groups, payload)
        except Exception:  # noqa: BLE001 - the database has the truth; clients re-sync from it
            logger.warning("could not announce %s", getattr(prepare, "__name__", prepare),
                           exc_info=True)

    async def announce_delta(self, *, step: int, index: int, text: str, offset: int = 0) -> None:
        trace = self.trace
        payload = live.delta_payload(trace_uuid=trace.uuid, seq=trace.event_seq, step=step,
                                     index=index, text=text, offset=offset)
        await live.publish(self.announcements.groups(trace), payload)
