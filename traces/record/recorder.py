"""The runtime ``Observer`` that persists a turn's events as steps and announces them.

Each event becomes a write of a ``Step`` (or a ``TrajectoryState``) through
``traces.record.services``, run on the turn's database thread, then an announcement on the channel
layer. Steps are addressed by a *key* derived from the event (``llm:<iteration>:<n>``,
``tool:<iteration>:<call id>``, ...) that maps to a stable ``seq`` and is stored in the step's
``meta``: the same event written again — twice by one recorder, or by a second run of the same
turn — lands on the same row, and an unchanged row is not written or announced again.

Text deltas are never persisted. They are coalesced into frames of about 50 ms (the first one
goes out at once) and announced with the current ``event_seq``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from decimal import Decimal
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
from agents.runtime.pricing import Price, Usage
from agents.runtime.providers.base import Outcome, outcome_of
from agents.runtime.providers.registry import PROVIDER_CLASSES
from agents.runtime.scrub import scrub_secrets

from ..costs.pricing import PriceTable, StepCost, price_table_for
from ..models import Step, Trace
from . import live, services

logger = logging.getLogger(__name__)

DbCall = Callable[..., Awaitable[Any]]
# About 50 ms; a little over, so that a turn streams at most 20 frames a second even counting
# the first frame (sent at once) and the last (sent when the model request ends).
DELTA_FRAME_S = 0.055
# A streaming answer's text so far is saved this often (and when it ends unfinished), so a
# request cut off by a worker that died keeps what it had streamed.
PARTIAL_SAVE_S = 2.0
# The first save comes sooner: a page opened (or reloaded) early in an answer finds its start.
PARTIAL_FIRST_SAVE_S = 0.5
# Payloads above this many characters are stored as a JSON note with their beginning.
PAYLOAD_MAX_CHARS = 2_000_000
JSON = "application/json"
TEXT = "text/plain"
APPROVAL_ERRORS = {
    "denied": "Denied by user.",
    "timeout": "Nobody decided in time, so the call was denied.",
    "cancelled": "The turn was stopped while this call waited for approval.",
}
Kind, StepStatus = Step.Kind, Step.Status


def _approval_error(reason: str) -> str:
    """What the approval step says when the call may not run: a person's decline reads as their
    decision ("Declined by a team admin."), not as a failure."""
    if reason.lower().startswith("declined by "):
        return reason[:1].upper() + reason[1:] + "."
    return APPROVAL_ERRORS.get(reason, reason)


def step_price(*, provider_kind: str, model: str, team_id: int | None = None,
               at: datetime | None = None, table: PriceTable | None = None) -> tuple[Price | None, str]:
    """The price of one model request and where it comes from (for people: "price table:
    gpt-4o (global v1, exact match)"), or (None, "") when the model has no price. Every cost
    figure is priced here (``traces.costs.pricing`` has the matching rule); without ``table`` the
    team's table is loaded (one query)."""
    table = table if table is not None else price_table_for(team_id)
    match = table.match(provider_kind=provider_kind, model=model, team_id=team_id, at=at)
    if match is None:
        return None, ""
    return match.price, match.describe()


def step_cost(*, provider_kind: str, model: str, usage: Usage, team_id: int | None = None,
              at: datetime | None = None, table: PriceTable | None = None) -> tuple[Decimal, bool]:
    """The cost of one model request and whether it is unpriced (no price: 0, never a
    neighbour's price)."""
    priced = step_cost_detail(provider_kind=provider_kind, model=model, usage=usage,
                              team_id=team_id, at=at, table=table)
    return priced.cost, priced.unpriced


def step_cost_detail(*, provider_kind: str, model: str, usage: Usage, team_id: int | None = None,
                     at: datetime | None = None, table: PriceTable | None = None) -> StepCost:
    table = table if table is not None else price_table_for(team_id)
    return table.cost(provider_kind=provider_kind, model=model, usage=usage, team_id=team_id, at=at)


def price_fields(priced: StepCost) -> dict[str, Any]:
    """The step columns and meta that record a cost and the price behind it."""
    return {"cost_usd": priced.cost, "price_id": priced.price_id, "price_match": priced.match_kind,
            "meta": {"unpriced": priced.unpriced}}


def payload_json(data: Any) -> tuple[str, str]:
    """``data`` as scrubbed JSON for a ``StepPayload``."""
    text = scrub_secrets(json.dumps(data, ensure_ascii=False, default=str))
    if len(text) > PAYLOAD_MAX_CHARS:
        text = json.dumps({"truncated": True, "chars": len(text), "head": text[:PAYLOAD_MAX_CHARS]},
                          ensure_ascii=False)
    return text, JSON


def payload_text(text: str) -> tuple[str, str]:
    text = scrub_secrets(text or "")
    if len(text) > PAYLOAD_MAX_CHARS:
        text = text[:PAYLOAD_MAX_CHARS] + f"\n… ({len(text) - PAYLOAD_MAX_CHARS} more characters)"
    return text, TEXT


def _ms(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 3)


class _Deltas:
    def __init__(self) -> None:
        self.step: int | None = None
        self.index = 0
        # characters of the step's text sent before the buffered parts: a frame says where its
        # text starts, so a page that loaded part of it (after a reload) joins without a gap
        self.chars = 0
        self.parts: list[str] = []
        self.last_sent = -math.inf
        self.timer: asyncio.TimerHandle | None = None
        self.lock = asyncio.Lock()
        self.pending: set[asyncio.Task[None]] = set()


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
        self.partial: dict[int, list[str]] = {}  # streaming request's seq -> its text so far
        self.partial_saved: dict[int, float] = {}  # seq -> when its text was last saved
        self.partial_started: dict[int, float] = {}  # seq -> when its first text came
        # Prices of the trace's team (and its providers' kinds by name), loaded when the first
        # request finishes, so the others are priced without a query.
        self.prices: PriceTable | None = None
        # The provider answering the running request: a failover moves it to a fallback.
        self.answering = ""
        self.deltas = _Deltas()
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
        seq = await self._write(key, {
            "kind": Kind.LLM_REQUEST, "name": event.model[:200], "iteration": iteration,
            "status": StepStatus.RUNNING, "success": None, "provider": event.provider[:100],
            "model": event.model[:200],
            "meta": {"tools_available": list(event.tools_available),
                     "messages_count": event.messages_count,
                     "estimated_input_tokens": event.estimated_input_tokens,
                     **({"cache_min_tokens": event.cache_min_tokens}
                        if event.cache_min_tokens is not None else {})},
        }, {"request": payload_json(event.request)})
        self.llm_open[iteration] = self.llm_last[iteration] = seq
        self.partial[seq] = []

    async def _llm_finished(self, event: LlmRequestFinished) -> None:
        await self.flush()
        iteration = event.iteration
        count = self.llm_count.setdefault(iteration, 1)
        open_seq = self.llm_open.pop(iteration, None)
        if open_seq is not None:
            await self._partial_done(open_seq, keep=not event.success)
        usage = event.usage
        provider = self.answering or event.provider
        if self.prices is None:  # read once per turn, when its first request is priced
            self.prices = await self.db(price_table_for, self.trace.team_id, with_providers=True)
        priced = self._price(provider=provider, model=event.model, usage=usage)
        recorded = price_fields(priced)
        meta: dict[str, Any] = {
            "first_token_ms": _ms(event.first_token_ms),
            "first_chunk_ms": _ms(event.first_chunk_ms),
            "stop_reason": event.stop_reason,
            "tool_calls": [str(c.get("name", "")) for c in event.tool_calls],
            **recorded.pop("meta"),
        }
        if event.usage_estimated:
            meta["usage_estimated"] = True
        if event.success:
            # How the answer ended (complete, tool_use, length, refusal, filtered): a cut-off or
            # refused answer must not read as a whole one, here or in the chat.
            self.last_outcome = outcome_of(event.stop_reason)
            meta["outcome"] = str(self.last_outcome)
        updates: dict[str, Any] = {
            "kind": Kind.LLM_REQUEST, "iteration": iteration, "model": event.model[:200],
            "provider": provider[:100],
            "status": StepStatus.OK if event.success else StepStatus.ERROR,
            "success": event.success, "duration_ms": _ms(event.latency_ms),
            "error": scrub_secrets(event.error or ""), "meta": meta, **recorded,
            **usage.to_dict(),
        }
        payloads = {"response": payload_json(event.response)} if event.response else None
        self.llm_last[iteration] = await self._write(f"llm:{iteration}:{count}", updates, payloads)

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

    # -- what a request has streamed so far ---------------------------------------------------------
    async def _partial_add(self, seq: int, text: str) -> None:
        parts = self.partial.get(seq)
        if parts is None:
            return
        parts.append(text)
        now = time.monotonic()
        first = self.partial_started.setdefault(seq, now)
        last = self.partial_saved.get(seq)
        due = (now - first >= PARTIAL_FIRST_SAVE_S) if last is None else (now - last >= PARTIAL_SAVE_S)
        if due:
            self.partial_saved[seq] = now
            await self._partial_save(seq)

    async def _partial_save(self, seq: int, *, detached: bool = False) -> None:
        if self.lost and not detached:
            return
        text, _ = payload_text("".join(self.partial.get(seq) or []))
        try:
            await self.db(services.step_partial_save, trace_id=self.trace.pk, seq=seq, text=text)
        except Exception:  # noqa: BLE001 - a lost partial costs an estimate, never the turn
            logger.warning("could not save the streamed text of step %s", seq, exc_info=True)

    async def _partial_done(self, seq: int, *, keep: bool) -> None:
        """The request ended: its answer (or error) is recorded, so the saved text goes, unless
        the request failed after streaming some (then it is kept with the step)."""
        parts = self.partial.pop(seq, None)
        self.partial_started.pop(seq, None)
        saved = self.partial_saved.pop(seq, None) is not None
        if keep and parts:
            self.partial[seq] = parts
            await self._partial_save(seq)
            self.partial.pop(seq, None)
        elif saved and not self.lost:
            await self.db(services.step_partial_save, trace_id=self.trace.pk, seq=seq, text="")

    async def save_partials(self) -> None:
        """Save the text of every request still streaming, after ``detach``: the runner hands
        the turn back, and the next attempt records what these requests had streamed."""
        for seq in list(self.partial):
            await self._partial_save(seq, detached=True)

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

    # -- tools and approvals ----------------------------------------------------------------------
    async def _tool_started(self, event: ToolStarted) -> None:
        seq = await self._write(f"tool:{event.iteration}:{event.call_id}", {
            "kind": Kind.TOOL_CALL, "name": event.name[:200], "iteration": event.iteration,
            "status": StepStatus.RUNNING, "success": None, "call_id": event.call_id[:200],
        }, {"arguments": payload_json(event.arguments)})
        self.tool_last[(event.iteration, event.name)] = seq

    async def _tool_finished(self, event: ToolFinished) -> None:
        key = f"tool:{event.iteration}:{event.call_id}"
        fresh = key not in self.keys
        payloads = {"output": payload_text(event.output)}
        if fresh:
            payloads["arguments"] = payload_json(event.arguments)
        meta: dict[str, Any] = {"output_preview": scrub_secrets(event.output_preview),
                                "output_chars": len(event.output), **event.meta}
        if key in self.allowed:
            meta["permission"] = self.allowed.pop(key)
        # The call's duration leaves out the wait for approval (its own step); the timeline
        # draws the call from when it ran.
        approval = self.keys.get(f"approval:{event.iteration}:{event.call_id}")
        waited = self.values.get(approval, {}).get("duration_ms") if approval else None
        if waited:
            meta["approval_wait_ms"] = waited
        seq = await self._write(key, {
            "kind": Kind.TOOL_CALL, "name": event.name[:200], "iteration": event.iteration,
            "call_id": event.call_id[:200],
            "status": StepStatus.OK if event.success else StepStatus.ERROR,
            "success": event.success, "duration_ms": _ms(event.duration_ms),
            "error": scrub_secrets(event.error or ""),
            "meta": meta,
        }, payloads)
        self.tool_last[(event.iteration, event.name)] = seq

    async def _approval_requested(self, event: ApprovalRequested) -> None:
        await self._write(f"approval:{event.iteration}:{event.call_id}", {
            "kind": Kind.APPROVAL, "name": event.name, "iteration": event.iteration,
            "status": StepStatus.WAITING, "success": None, "call_id": event.call_id[:200],
            "meta": {"timeout_s": event.timeout_s},
        }, {"arguments": payload_json(event.arguments)})

    async def _approval_decided(self, event: ApprovalDecided) -> None:
        meta: dict[str, Any] = {"reason": event.reason}
        decided_by = self.decided_by(event.call_id)
        if decided_by:
            meta["decided_by"] = decided_by
        await self._write(f"approval:{event.iteration}:{event.call_id}", {
            "kind": Kind.APPROVAL, "name": event.name, "iteration": event.iteration,
            "call_id": event.call_id[:200],
            "status": StepStatus.OK if event.approved else StepStatus.ERROR,
            "success": event.approved, "duration_ms": _ms(event.waited_ms),
            "error": "" if event.approved else _approval_error(event.reason),
            "meta": meta,
        })

    async def _policy_decided(self, event: ToolPolicyDecided) -> None:
        """The permission outcome of a call (Claw Code's), on the call's own step. An allowed
        call's goes with its result (one write less per call); a call that asks or is denied
        shows why at once."""
        policy = {"policy": event.policy, "outcome": event.outcome, "source": event.source}
        if event.reason:
            policy["reason"] = scrub_secrets(event.reason)[:1000]
        key = f"tool:{event.iteration}:{event.call_id}"
        if event.outcome == "allow" and key in self.keys:
            self.allowed[key] = policy
            return
        await self._write(key, {
            "kind": Kind.TOOL_CALL, "name": event.name[:200], "iteration": event.iteration,
            "call_id": event.call_id[:200], "meta": {"permission": policy}})

    async def _hook_ran(self, event: HookRan) -> None:
        """A hook's run is a step of its own: which hook, on what, its decision and what it said."""
        base = f"hook:{event.iteration}:{event.call_id or event.event}:{event.event}"
        number = self.hook_count.get(base, 0) + 1
        self.hook_count[base] = number
        ok = event.decision in ("allow", "warn", "rewrite")
        messages = [scrub_secrets(m)[:2000] for m in event.messages[:10]]
        meta: dict[str, Any] = {"event": event.event, "hook_kind": event.hook_kind,
                                "decision": event.decision, "tool": event.tool[:200]}
        if event.detail:
            meta["detail"] = event.detail[:200]
        await self._write(f"{base}:{number}", {
            "kind": Kind.HOOK, "name": event.hook[:200], "iteration": event.iteration,
            "status": StepStatus.OK if ok else StepStatus.ERROR, "success": ok,
            "call_id": event.call_id[:200], "duration_ms": _ms(event.duration_ms),
            "error": "" if ok else "\n".join(messages)[:2000],
            "meta": meta,
        }, {"output": payload_json({"decision": event.decision, "messages": messages})})

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
        await self._write(f"compaction:{requests}:{event.reason}", {
            "kind": Kind.COMPACTION, "name": event.reason, "status": StepStatus.OK,
            "success": True, "iteration": max(self.llm_count, default=0),
            "meta": {"reason": event.reason,
                     "removed_message_count": event.removed_message_count},
        }, {"output": payload_text(event.summary)} if event.summary else None)

    async def _retry(self, event: Retry) -> None:
        if event.failover and event.next_provider:
            self.answering = event.next_provider
        request = max(self.llm_last.values(), default=0)
        await self._write(f"retry:{request}:{event.provider}:{event.model}:{event.attempt}", {
            "kind": Kind.RETRY, "name": f"{event.provider} · {event.model}"[:200],
            "status": StepStatus.ERROR, "success": False, "provider": event.provider[:100],
            "model": event.model[:200], "error": scrub_secrets(event.error),
            "iteration": max(self.llm_count, default=0),
            "meta": {"attempt": event.attempt, "backoff_ms": event.backoff_ms,
                     "failover": event.failover, "next_provider": event.next_provider,
                     "next_model": event.next_model, **({"skipped": True} if event.skipped else {})},
        })

    async def _restarted(self, event: LlmStreamRestarted) -> None:
        """A streamed answer broke off and starts over: a retry step holding what had been
        streamed, announced so that live views drop that text (``restarted_step``)."""
        await self.flush()  # the void text's frames go out before the step that voids them
        seq = self.llm_open.get(event.iteration) or self.llm_last.get(event.iteration, 0)
        if seq in self.partial:
            self.partial[seq] = []
        if self.deltas.step == seq:
            self.deltas.chars = 0  # the new text starts over at offset 0
        count = self.restarts[seq] = self.restarts.get(seq, 0) + 1
        if event.next_provider:
            self.answering = event.next_provider
        await self._write(f"restart:{seq}:{count}", {
            "kind": Kind.RETRY, "name": f"{event.provider} · {event.model}"[:200],
            "status": StepStatus.ERROR, "success": False, "provider": event.provider[:100],
            "model": event.model[:200], "error": scrub_secrets(event.reason),
            "iteration": event.iteration,
            "meta": {"restart": True, "restarted_step": seq, "failover": (
                         (event.next_provider, event.next_model) != (event.provider, event.model)),
                     "next_provider": event.next_provider, "next_model": event.next_model,
                     "partial_chars": len(event.partial_text)},
        }, {"output": payload_text(event.partial_text)})

    async def _final_answer(self, event: FinalAnswer) -> None:
        self.final_text = event.text

    async def _turn_error(self, event: TurnError) -> None:
        await self.flush()
        name = "timed_out" if self.stop_cause == "time_limit" else event.error_kind
        await self._write(f"error:{event.error_kind}", {
            "kind": Kind.ERROR, "name": name[:200], "iteration": event.iteration,
            "status": StepStatus.ERROR, "success": False,
            "error": scrub_secrets(event.message), "meta": {"error_kind": event.error_kind},
        }, {"output": payload_text(event.details)} if event.details else None)

    async def record_resume(self, *, worker: str, iteration: int, paused_s: float | None,
                            meta: dict[str, Any], name: str = "") -> None:
        """The step that says this attempt continues the turn from its record, where, and
        after how long a pause (``name``: another title, such as a fork's)."""
        after = f" after {paused_s:.1f} s" if paused_s is not None else ""
        await self._write(f"resume:{self.attempt}", {
            "kind": Kind.RESUME, "name": (name or f"resumed on {worker}{after}")[:200],
            "iteration": iteration, "status": StepStatus.OK, "success": True,
            "meta": meta,
        })

    async def record_error(self, *, message: str, error_kind: str) -> None:
        """An error step for a failure outside the loop (setup, an internal error)."""
        await self._turn_error(TurnError(message=message, error_kind=error_kind))

    # -- text deltas --------------------------------------------------------------------------------
    async def _text_delta(self, event: TextDelta) -> None:
        seq = self.llm_open.get(event.iteration)
        if seq is None or not event.text:
            return
        deltas = self.deltas
        if deltas.step != seq:
            await self.flush()
            deltas.step, deltas.index, deltas.chars, deltas.last_sent = seq, 0, 0, -math.inf
        deltas.parts.append(event.text)
        await self._partial_add(seq, event.text)
        wait = DELTA_FRAME_S - (time.monotonic() - deltas.last_sent)
        if wait <= 0:
            await self._send_frame()
        elif deltas.timer is None:
            deltas.timer = asyncio.get_running_loop().call_later(wait, self._frame_due)

    def _frame_due(self) -> None:
        self.deltas.timer = None
        task = asyncio.ensure_future(self._send_frame())
        self.deltas.pending.add(task)
        task.add_done_callback(self.deltas.pending.discard)

    async def _send_frame(self) -> None:
        deltas = self.deltas
        async with deltas.lock:
            if deltas.timer is not None:
                deltas.timer.cancel()
                deltas.timer = None
            if not deltas.parts or deltas.step is None or self.lost:
                deltas.parts.clear()
                return
            text = "".join(deltas.parts)
            deltas.parts.clear()
            index, offset = deltas.index, deltas.chars
            deltas.index += 1
            deltas.chars += len(text)
            deltas.last_sent = time.monotonic()
            step = deltas.step
        await self.announce_delta(step=step, index=index, text=text, offset=offset)

    async def flush(self) -> None:
        """Send what the delta buffer holds (before the step it belongs to is finished)."""
        await self._send_frame()
        if self.deltas.pending:
            await asyncio.gather(*list(self.deltas.pending), return_exceptions=True)

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
