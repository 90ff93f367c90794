"""The runtime ``Observer`` that persists a turn's events as steps and announces them.

Each event becomes a write of a ``Step`` (or a ``TrajectoryState``) on a step keyed by the event
(``llm:<iteration>:<n>``, ``tool:<iteration>:<call id>``, ...); how a keyed step is written once
and announced is ``step_writer``. What each event writes on its step is ``step_values``; the text
a model request streams, sent live in frames and saved now and then, is ``streaming``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
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

from ..costs.cache_selectors import lost_meta, previous_prompt_tokens
from ..costs.pricing import PriceTable, StepCost, price_table_for
from ..models import Trace
from . import live, services
from . import step_values as values_of
from .step_values import payload_json
from .step_writer import DbCall, StepWriter
from .streaming import StreamedText

logger = logging.getLogger(__name__)


def price_fields(priced: StepCost) -> dict[str, Any]:
    """The step columns and meta that record a cost and the price behind it."""
    return {"cost_usd": priced.cost, "price_id": priced.price_id, "price_match": priced.match_kind,
            "meta": {"unpriced": priced.unpriced}}


class TraceRecorder(StepWriter):
    """Observer for one attempt at one trace. ``db(fn, **kwargs)`` runs ``fn`` on the turn's
    database thread. When the attempt loses the trace (reaped, claimed again) every later
    event is dropped and ``on_lost`` is called once."""

    def __init__(self, *, trace: Trace, attempt: int, db: DbCall,
                 on_lost: Callable[[], None] | None = None,
                 announcements: live.Announcements = live.INSPECTOR) -> None:
        super().__init__(trace=trace, attempt=attempt, db=db, on_lost=on_lost,
                         announcements=announcements)
        # Set by the runner when it stops the turn itself ("time_limit"), to name the error.
        self.stop_cause: str | None = None
        self.decided_by: Callable[[str], str | None] = lambda call_id: None
        self.final_text = ""
        # How the latest successful model request's answer ended.
        self.last_outcome: Outcome | None = None
        # An allowed call's permission, kept for its finished step's write.
        self.allowed: dict[str, dict[str, Any]] = {}
        self.llm_open: dict[int, int] = {}      # iteration -> seq of its running model request
        self.llm_count: dict[int, int] = {}     # iteration -> model requests started in it
        self.llm_last: dict[int, int] = {}      # iteration -> seq of its latest model request
        self.tool_last: dict[tuple[int, str], int] = {}  # (iteration, tool) -> latest call's seq
        self.restarts: dict[int, int] = {}      # model request's seq -> restarts of its answer
        # Prices of the trace's team (and its providers' kinds by name), loaded when the first
        # request finishes, so the others are priced without a query.
        self.prices: PriceTable | None = None
        # The prompt tokens of the conversation's latest successful model request, which the
        # next one is compared with for what a cache miss cost (read from the database only
        # when the turn's first request could lose money to one), and each iteration's
        # provider's shortest cached prompt.
        self.cache_previous: int | None = None
        self.cache_previous_read = False
        self.cache_min: dict[int, int | None] = {}
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

    def use_stored(self, steps: services.StoredSteps) -> None:
        super().use_stored(steps)
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

    # -- model requests ---------------------------------------------------------------------------
    async def _llm_started(self, event: LlmRequestStarted) -> None:
        iteration = event.iteration
        if iteration not in self.llm_open:  # not a replay of the request that is running
            self.llm_count[iteration] = self.llm_count.get(iteration, 0) + 1
        key = f"llm:{iteration}:{self.llm_count.get(iteration, 1)}"
        self.answering = event.provider
        self.cache_min[iteration] = event.cache_min_tokens
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
        price = price_fields(priced)
        outcome = None
        if event.success:
            price["meta"].update(await self._cache_lost(event, priced))
            # How the answer ended: a cut-off or refused answer must not read as a whole one,
            # here or in the chat.
            outcome = self.last_outcome = outcome_of(event.stop_reason)
        self.llm_last[iteration] = await self._write(
            f"llm:{iteration}:{count}",
            *values_of.llm_finished(event, provider=provider, price=price, outcome=outcome))

    async def _cache_lost(self, event: LlmRequestFinished, priced: StepCost) -> dict[str, int]:
        """What a cache miss of this successful request cost, against the conversation's
        successful request before it (``cache_selectors.lost_meta``), for the cost ledger."""
        usage = event.usage
        prompt = usage.input_tokens + usage.cache_write_tokens + usage.cache_read_tokens
        previous = self.cache_previous
        rates = priced.match.row.price if priced.match else None
        if (previous is None and not self.cache_previous_read and rates is not None
                and rates.input > rates.cache_read):
            # The turn's first request that could lose money: the one before it is the turn
            # before's (or, for a resumed turn, its own earlier request).
            self.cache_previous_read = True
            previous = await self.db(previous_prompt_tokens, conversation_id=self.trace.conversation_id,
                                     trace_id=self.trace.pk)
        self.cache_previous = prompt
        if rates is None:
            return {}
        return lost_meta(previous_tokens=previous, prompt_tokens=prompt,
                         read_tokens=usage.cache_read_tokens,
                         min_tokens=self.cache_min.get(event.iteration),
                         input_per_mtok=rates.input, cache_read_per_mtok=rates.cache_read)

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
        waited = self.values.get(approval, {}).get("duration_ms") if approval else None
        seq = await self._write(key, *values_of.tool_finished(
            event, with_arguments=key not in self.keys, permission=self.allowed.pop(key, None),
            approval_wait_ms=waited), moved=self._decided_at(approval) if waited else None)
        self.tool_last[(event.iteration, event.name)] = seq

    def _decided_at(self, approval: int) -> datetime | None:
        """When approval step ``approval`` ended (its call could run from then on), if this
        recorder wrote it."""
        start = self.step_starts.get(approval)
        duration = self.values.get(approval, {}).get("duration_ms")
        return start[0] + timedelta(milliseconds=duration) if start and duration is not None else None

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
