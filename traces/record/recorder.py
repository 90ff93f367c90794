"""The runtime ``Observer`` that persists a turn's events as steps and announces them.

Each event becomes a write of a ``Step`` (or a ``TrajectoryState``) through
``traces.record.services``, run on the turn's database thread, then an announcement on the channel
layer. Steps are addressed by a *key* derived from the event (``llm:<iteration>:<n>``,
``tool:<iteration>:<call id>``, ...) that maps to a stable ``seq`` and is stored in the step's
``meta``: the same event written again — twice by one recorder, or by a second run of the same
turn — lands on the same row, and an unchanged row is not written or announced again.

What each event writes on its step is ``step_values``; the text a model request streams, sent
live in frames and saved now and then, is ``streaming``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from django.utils import timezone

from agents.runtime.events import (
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    Event,
    FinalAnswer,
    HookRan,
    LlmRequestFinished,
    LlmRequestStarted,
    LlmStreamRestarted,
    LoopDetected,
    MessageAppended,
    Retry,
    TextDelta,
    ToolCallParseIssue,
    ToolFinished,
    ToolPolicyDecided,
    ToolStarted,
    TrajectoryStateRecorded,
    TurnError,
)
from agents.runtime.pricing import Usage
from agents.runtime.providers.base import Outcome, outcome_of
from agents.runtime.providers.registry import PROVIDER_CLASSES

from ..costs.pricing import PriceTable, StepCost, price_table_for
from ..models import Step, Trace
from . import live, services
from . import step_values as values_of
from .step_values import payload_json
from .streaming import StreamedText

logger = logging.getLogger(__name__)

DbCall = Callable[..., Awaitable[Any]]
StepStatus = Step.Status


def price_fields(priced: StepCost) -> dict[str, Any]:
    """The step columns and meta that record a cost and the price behind it."""
    return {"cost_usd": priced.cost, "price_id": priced.price_id, "price_match": priced.match_kind,
            "meta": {"unpriced": priced.unpriced}}


class TraceRecorder:
    """Observer for one attempt at one trace. ``db(fn, **kwargs)`` runs ``fn`` on the turn's
    database thread. When the attempt loses the trace (reaped, claimed again) every later
    event is dropped and ``on_lost`` is called once."""

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
        # Set by the runner when it stops the turn itself ("time_limit"), to name the error.
        self.stop_cause: str | None = None
        self.decided_by: Callable[[str], str | None] = lambda call_id: None
        self.final_text = ""
        # How the latest successful model request's answer ended.
        self.last_outcome: Outcome | None = None
        self.keys: dict[str, int] = {}
        self.last_seq = 0
        # The highest step number stored before this run: a step past it is new (not looked for).
        self.stored_upto = 0
        self.step_ids: dict[int, int] = {}  # seq -> the step's row id, once written
        # A trace whose first run this is holds no steps or states of earlier runs.
        self.fresh = True
        self.states_written: set[int] = set()
        # An allowed call's permission, kept for its finished step's write.
        self.allowed: dict[str, dict[str, Any]] = {}
        self.step_starts: dict[int, tuple[datetime, int]] = {}  # seq -> its start, as stored
        self.values: dict[int, dict[str, Any]] = {}
        self.llm_open: dict[int, int] = {}      # iteration -> seq of its running model request
        self.llm_count: dict[int, int] = {}     # iteration -> model requests started in it
        self.llm_last: dict[int, int] = {}      # iteration -> seq of its latest model request
        self.tool_last: dict[tuple[int, str], int] = {}  # (iteration, tool) -> latest call's seq
        self.restarts: dict[int, int] = {}      # model request's seq -> restarts of its answer
        # Prices of the trace's team (and its providers' kinds by name), loaded when the first
        # request finishes, so the others are priced without a query.
        self.prices: PriceTable | None = None
        # The provider answering the running request: a failover moves it to a fallback.
        self.answering = ""
        self.streamed = StreamedText(trace_id=trace.pk, db=db, send=self.announce_delta,
                                     lost=lambda: self.lost)
        self.handlers: dict[type[Event], Callable[[Any], Awaitable[None]]] = {
            LlmRequestStarted: self._llm_started,
            LlmRequestFinished: self._llm_finished,
            TextDelta: self._text_delta,
            ToolStarted: self._tool_started,
            ToolFinished: self._tool_finished,
            ApprovalRequested: self._approval_requested,
            ApprovalDecided: self._approval_decided,
            TrajectoryStateRecorded: self._state,
            Compacted: self._compacted,
            Retry: self._retry,
            LlmStreamRestarted: self._restarted,
            LoopDetected: self._loop_detected,
            ToolCallParseIssue: self._parse_issue,
            FinalAnswer: self._final_answer,
            TurnError: self._turn_error,
            MessageAppended: self._message_appended,
            ToolPolicyDecided: self._policy_decided,
            HookRan: self._hook_ran,
        }
        self.hook_count: dict[str, int] = {}

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
        # A resumed turn's next request of an iteration is a new step beside the earlier ones.
        for key in self.keys:
            kind, _, rest = key.partition(":")
            iteration, _, number = rest.partition(":")
            if kind == "llm" and iteration.isdigit() and number.isdigit():
                self.llm_count[int(iteration)] = max(self.llm_count.get(int(iteration), 0),
                                                     int(number))

    async def emit(self, event: Event) -> None:
        if self.lost:
            return
        handler = self.handlers.get(type(event))
        if handler is not None:
            await handler(event)

    # -- plumbing ---------------------------------------------------------------------------------
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
                     payloads: dict[str, tuple[str, str]] | None = None) -> int:
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
                                 offset_ms=self._offset_ms(now), new=new, known=known)
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

    # -- model requests ---------------------------------------------------------------------------
    async def _llm_started(self, event: LlmRequestStarted) -> None:
        iteration = event.iteration
        if iteration not in self.llm_open:  # not a replay of the request that is running
            self.llm_count[iteration] = self.llm_count.get(iteration, 0) + 1
        key = f"llm:{iteration}:{self.llm_count.get(iteration, 1)}"
        self.answering = event.provider
        seq = await self._write(key, *values_of.llm_started(event))
        self.llm_open[iteration] = self.llm_last[iteration] = seq
        self.streamed.open(seq)

    async def _llm_finished(self, event: LlmRequestFinished) -> None:
        await self.flush()
        iteration = event.iteration
        count = self.llm_count.setdefault(iteration, 1)
        open_seq = self.llm_open.pop(iteration, None)
        if open_seq is not None:
            await self.streamed.done(open_seq, keep=not event.success)
        provider = self.answering or event.provider
        if self.prices is None:  # read once per turn, when its first request is priced
            self.prices = await self.db(price_table_for, self.trace.team_id, with_providers=True)
        priced = self._price(provider=provider, model=event.model, usage=event.usage)
        outcome = None
        if event.success:
            # How the answer ended: a cut-off or refused answer must not read as a whole one,
            # here or in the chat.
            outcome = self.last_outcome = outcome_of(event.stop_reason)
        self.llm_last[iteration] = await self._write(
            f"llm:{iteration}:{count}",
            *values_of.llm_finished(event, provider=provider, price=price_fields(priced),
                                    outcome=outcome))

    async def _message_appended(self, event: MessageAppended) -> None:
        """The answer as it went into the history, on its model request's step: what the turn
        is continued from if its worker stops."""
        seq = self.llm_last.get(event.iteration)
        if seq is None or self.lost:
            return
        content, content_type = payload_json(event.message)
        try:
            await self.db(services.step_payload_put, trace_id=self.trace.pk, seq=seq,
                          kind="message", content=content, content_type=content_type,
                          step_id=self.step_ids.get(seq))
        except Exception:  # noqa: BLE001 - a resumed turn then asks the model again
            logger.warning("could not keep the answer of step %s", seq, exc_info=True)

    def _price(self, *, provider: str, model: str, usage: Usage) -> StepCost:
        """Price a finished request with the team's table, at this moment's prices. The
        provider's kind comes from its name (a failover may have moved the request to a
        fallback of another kind), else from the trace."""
        table = self.prices or PriceTable()
        team_id = self.trace.team_id
        kind = (table.kind_of(team_id=team_id, provider_name=provider)
                or (provider if provider in PROVIDER_CLASSES else "") or self.trace.provider_kind)
        return table.cost(provider_kind=kind, model=model, usage=usage, team_id=team_id,
                          at=timezone.now())

    async def _parse_issue(self, event: ToolCallParseIssue) -> None:
        seq = self.llm_last.get(event.iteration)
        key = next((k for k, s in self.keys.items() if s == seq), None)
        if key is None:
            return
        await self._write(key, {"meta": {"parse_issue": event.issue,
                                         "parse_excerpt": event.excerpt}})

    async def _retry(self, event: Retry) -> None:
        if event.failover and event.next_provider:
            self.answering = event.next_provider
        request = max(self.llm_last.values(), default=0)
        await self._write(f"retry:{request}:{event.provider}:{event.model}:{event.attempt}",
                          *values_of.retry(event, iteration=max(self.llm_count, default=0)))

    async def _restarted(self, event: LlmStreamRestarted) -> None:
        """A streamed answer broke off and starts over: a retry step holding what had been
        streamed, announced so that live views drop that text (``restarted_step``)."""
        await self.flush()  # the void text's frames go out before the step that voids them
        seq = self.llm_open.get(event.iteration) or self.llm_last.get(event.iteration, 0)
        self.streamed.restart(seq)
        count = self.restarts[seq] = self.restarts.get(seq, 0) + 1
        if event.next_provider:
            self.answering = event.next_provider
        await self._write(f"restart:{seq}:{count}", *values_of.restarted(event, restarted_step=seq))

    async def _text_delta(self, event: TextDelta) -> None:
        seq = self.llm_open.get(event.iteration)
        if seq is None or not event.text:
            return
        await self.streamed.add(seq, event.text)

    async def flush(self) -> None:
        """Send the text deltas not sent yet (before the step they belong to is finished)."""
        await self.streamed.flush()

    async def save_partials(self) -> None:
        """Save the text of every request still streaming, after ``detach``: the runner hands
        the turn back, and the next attempt records what these requests had streamed."""
        await self.streamed.save_all()

    # -- tools and approvals ----------------------------------------------------------------------
    async def _tool_started(self, event: ToolStarted) -> None:
        seq = await self._write(f"tool:{event.iteration}:{event.call_id}",
                                *values_of.tool_started(event))
        self.tool_last[(event.iteration, event.name)] = seq

    async def _tool_finished(self, event: ToolFinished) -> None:
        key = f"tool:{event.iteration}:{event.call_id}"
        approval = self.keys.get(f"approval:{event.iteration}:{event.call_id}")
        seq = await self._write(key, *values_of.tool_finished(
            event, with_arguments=key not in self.keys, permission=self.allowed.pop(key, None),
            approval_wait_ms=self.values.get(approval, {}).get("duration_ms") if approval else None))
        self.tool_last[(event.iteration, event.name)] = seq

    async def _approval_requested(self, event: ApprovalRequested) -> None:
        await self._write(f"approval:{event.iteration}:{event.call_id}",
                          *values_of.approval_requested(event))

    async def _approval_decided(self, event: ApprovalDecided) -> None:
        await self._write(f"approval:{event.iteration}:{event.call_id}", *values_of.approval_decided(
            event, decided_by=self.decided_by(event.call_id)))

    async def _policy_decided(self, event: ToolPolicyDecided) -> None:
        """The permission outcome of a call, on the call's own step. An allowed call's goes
        with its result (one write less per call); a call that asks or is denied shows why at
        once."""
        key = f"tool:{event.iteration}:{event.call_id}"
        if event.outcome == "allow" and key in self.keys:
            self.allowed[key] = values_of.tool_permission(event)
            return
        await self._write(key, *values_of.tool_permission_decided(event))

    async def _hook_ran(self, event: HookRan) -> None:
        """A hook's run is a step of its own (each run of the same hook on the same thing too)."""
        base = f"hook:{event.iteration}:{event.call_id or event.event}:{event.event}"
        number = self.hook_count.get(base, 0) + 1
        self.hook_count[base] = number
        await self._write(f"{base}:{number}", *values_of.hook_ran(event))

    async def _loop_detected(self, event: LoopDetected) -> None:
        # Noted on the tool call it concerns; a "break" also ends the turn, which the runtime
        # reports as a TurnError (an error step).
        seq = self.tool_last.get((event.iteration, event.tool))
        key = next((k for k, s in self.keys.items() if s == seq), None) if seq else None
        if key is not None:
            await self._write(key, {"meta": {"loop_detection": {"level": event.level,
                                                                "message": event.message}}})

    # -- everything else ----------------------------------------------------------------------------
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

    async def _compacted(self, event: Compacted) -> None:
        requests = sum(self.llm_count.values())
        await self._write(f"compaction:{requests}:{event.reason}",
                          *values_of.compacted(event, iteration=max(self.llm_count, default=0)))

    async def _final_answer(self, event: FinalAnswer) -> None:
        self.final_text = event.text

    async def _turn_error(self, event: TurnError) -> None:
        await self.flush()
        name = "timed_out" if self.stop_cause == "time_limit" else event.error_kind
        await self._write(f"error:{event.error_kind}", *values_of.turn_error(event, name=name))

    async def record_resume(self, *, worker: str, iteration: int, paused_s: float | None,
                            meta: dict[str, Any], name: str = "") -> None:
        """The step that says this attempt continues the turn from its record, where, and
        after how long a pause (``name``: another title, such as a fork's)."""
        after = f" after {paused_s:.1f} s" if paused_s is not None else ""
        await self._write(f"resume:{self.attempt}", *values_of.resumed(
            name=name or f"resumed on {worker}{after}", iteration=iteration, meta=meta))

    async def record_error(self, *, message: str, error_kind: str) -> None:
        """An error step for a failure outside the loop (setup, an internal error)."""
        await self._turn_error(TurnError(message=message, error_kind=error_kind))

    # -- the end ------------------------------------------------------------------------------------
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
