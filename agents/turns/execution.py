"""Running one turn inside a worker: claim, build, run the loop, record, close.

Concurrency model. Workers use Celery's thread pool, so every task runs in its own thread and a
process carries as many turns as it has threads (``CELERY_WORKER_CONCURRENCY``, 50 by default):
a turn spends nearly all its time waiting on a model, and waiting threads cost little. In its
thread a turn runs the async runtime in the thread's own event loop, kept from one turn to the
next (``turn_threads.thread_loop_run``), so the connections a turn's announcements use (the channel layer's,
one per loop) are opened once per thread, not once per turn. Django's ORM is synchronous and
refuses to run inside an event loop, so every query of the turn runs on a single-thread executor
that the turn has to itself (``turn_threads.TurnDb``): writes stay in order and the turn holds exactly one
database connection. These executors are pooled per process, so a worker keeps at most one
connection per concurrent turn instead of opening one per turn; when a turn ends, its
connection is released as at the end of a web request. The event loop thread itself never
touches the database.

Beside the loop, a turn renews its heartbeat (every ``TURN_HEARTBEAT_S``) and reads the database
cancel flag as a fallback there; its Redis cancel key is polled, with those of every other turn
of the process, by one thread (``turn_signals.CancelWatch``, every ``TURN_CANCEL_POLL_S``). The agent's time limit is enforced here, because the thread
pool cannot enforce Celery's: at the soft limit the turn is cancelled with a reason and ends
``timed_out`` with every step recorded so far; at the hard limit the loop is abandoned. If the
whole thread hangs, the reaper is the backstop.

A worker that is told to stop hands its running turns back (``running``; a turn's part is
``TurnRun.hand_back``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents.runtime.cancel import CancelToken
from agents.runtime.loop import TurnResult, run_turn
from agents.tools.mcp import mcp_connections_close
from agents.turns.announce import announcements
from agents.turns.builder import TurnSetup, turn_setup_build
from agents.turns.lifecycle import (
    ClosedTurn,
    TurnOutcome,
    may_resume,
    trace_claim,
    trace_close,
    trace_hand_back,
)
from agents.turns.message_hooks import DROPPED_MESSAGE, message_received, message_sending
from agents.turns.outcome import turn_outcome
from agents.turns.providers import TurnSetupError
from agents.turns.replay import turn_plan
from agents.turns.resume import ResumePlan
from agents.turns.running import RUNNING
from agents.turns.signals import CancelWatch, RedisApprover, TurnSignals
from agents.turns.turn_threads import CONNECTION_LOST_REASON, TurnDb, thread_loop_run
from agentsite.db import connection_lost
from agentsite.live import announce_lists
from traces.models import Trace
from traces.record.recorder import TraceRecorder
from traces.record.services import (
    StoredSteps,
    TraceNotOwned,
    step_keys,
    trace_configure,
    trace_heartbeat,
)

logger = logging.getLogger(__name__)

TIME_LIMIT_MESSAGE = (
    "The turn ran longer than this agent's time limit of {seconds} seconds and was stopped. "
    "The steps so far are kept. Ask again, perhaps in smaller parts, or ask an admin to raise "
    "the limit."
)
SETUP_ERROR_MESSAGE = (
    "The turn could not be prepared because of an internal error. Try again; if it happens "
    "again, tell an admin (the worker's log has the details)."
)
LOST_REASON = "This turn was taken over by the reaper or another worker."
HANDED_BACK = "handed_back"
# How long a cancelled turn may take to stop before its thread goes on without it.
STOP_GRACE_S = 2.0


def turn_execute(*, trace_id: int, worker: str) -> str:
    """Claim trace ``trace_id`` and run its turn to the end. Returns the trace's final status,
    "" when there was nothing to claim (a second delivery), or "lost" when the trace was taken
    away while it ran."""
    db = TurnDb.acquire()
    try:
        trace = db.call(trace_claim, trace_id=trace_id, worker=worker)
        if trace is None:
            logger.info("trace %s: nothing to claim", trace_id)
            return ""
        return thread_loop_run(TurnRun(trace=trace, db=db).run())
    finally:
        db.release()


class TurnRun:
    """One attempt at one claimed trace, inside its event loop."""

    def __init__(self, *, trace: Trace, db: TurnDb) -> None:
        self.trace = trace
        self.db = db
        self.attempt = trace.attempts
        self.agent = trace.agent if Trace.agent.is_cached(trace) else None  # set by the setup
        self.cancel = CancelToken()
        self.stop_cause: str | None = None  # "time_limit", "cancelled", "lost" or "handoff"
        self.time_limit_at: datetime | None = None  # when the time limit stopped the turn (for its audit)
        self.recorder = TraceRecorder(trace=trace, attempt=self.attempt, db=db,
                                      on_lost=self._lost, announcements=announcements())
        self.plan: ResumePlan | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[str] | None = None
        self.handoff_reason = ""
        self.finishing = False  # the loop is over: the turn ends here, whatever comes
        self.handed_back = False
        self.ended = threading.Event()

    async def run(self) -> str:
        self.loop, self.task = asyncio.get_running_loop(), asyncio.current_task()
        RUNNING.add(self)
        self.db.on_connection_lost = self._connection_lost
        try:
            return await self._run()
        except asyncio.CancelledError:
            if self.stop_cause != "handoff":
                raise
            return await self._hand_back()
        finally:
            self.db.on_connection_lost = None
            RUNNING.discard(self)
            self.ended.set()

    def _connection_lost(self, detail: str) -> bool:
        """A database call of this turn lost its connection (in the turn's loop): what it was
        writing was not kept, so the turn stops and is handed back, to continue from its last
        recorded step on a new connection, here or on another worker. False (the turn fails
        with the error) once it was resumed ``TURN_MAX_RESUMES`` times already."""
        first_line = detail.strip().splitlines()[0] if detail.strip() else ""
        if not may_resume(attempts=self.attempt, meta=self.trace.meta):
            logger.error("trace %s: the database connection broke (%s) on attempt %s: no more "
                         "resumptions", self.trace.pk, first_line, self.attempt)
            return False
        logger.warning("trace %s: the database connection broke (%s); handing the turn back",
                       self.trace.pk, first_line)
        self.handoff_reason = CONNECTION_LOST_REASON
        self.stop_cause = "handoff"
        self.recorder.detach()
        if self.task is not None and not self.task.done() and asyncio.current_task() is not self.task:
            self.task.cancel()
        return True

    async def _run(self) -> str:
        await self.recorder.announce(self.recorder.announcements.trace, self.trace)
        # Everything before the loop in one visit to the database thread.
        prepared = await self.db(self._prepare)
        self.plan = prepared.plan
        if prepared.stored is not None:
            self.recorder.use_stored(prepared.stored)
        if isinstance(prepared.error, TurnSetupError):
            return await self._fail(str(prepared.error), "config")
        if prepared.error is not None:
            logger.error("trace %s: setup failed", self.trace.pk, exc_info=prepared.error)
            return await self._fail(SETUP_ERROR_MESSAGE, "internal")
        setup = prepared.setup
        assert setup is not None
        self.agent, self.recorder.prices = setup.agent or self.agent, setup.prices or self.recorder.prices
        if prepared.configured is None:  # the trace was taken from this attempt
            await _aclose(setup.provider)
            return "lost"
        for name, value in prepared.configured.items():
            setattr(self.trace, name, value)
        await self.recorder.announce(self.recorder.announcements.trace, self.trace)
        if self.plan is None and not self.trace.conversation.ephemeral:
            # its person's home and sidebar (here, not in the request that sent the message:
            # a hung Redis must not hold a send for one more deadline)
            await announce_lists(self.trace.user_id)
        if self.plan is not None:
            await self._announce_resumption(self.plan)
        if setup.received_hooks:
            dropped = await message_received(setup, trace=self.trace, db=self.db,
                                             emit=self.recorder.emit)
            if dropped is not None:
                await _aclose(setup.provider)
                return await self._fail(DROPPED_MESSAGE.format(reason=dropped), "hook")
        result = await self._loop(setup)
        outcome = self._outcome(result, setup)
        if setup.sending_hooks and result is not None:
            await message_sending(setup, outcome, iteration=result.iterations, trace=self.trace,
                                  db=self.db, emit=self.recorder.emit)
        closed = await self._finish(outcome)
        return closed.trace.status if closed is not None else "lost"

    def _prepare(self) -> Prepared:
        """On the database thread: what an earlier attempt recorded (the turn continues from
        it; its cut-off requests end as aborted attempts first, so the recorder starts from
        what is stored), the turn's setup, and the record of how it was set up."""
        prepared = Prepared(plan=turn_plan(trace=self.trace, attempt=self.attempt))
        if self.recorder.needs_stored():
            prepared.stored = step_keys(trace_id=self.trace.pk)
        try:
            prepared.setup = setup = turn_setup_build(trace=self.trace, on_retry=self.recorder.emit,
                                                      db=self.db)
        except Exception as exc:  # noqa: BLE001 - reported by the turn (its error step)
            if connection_lost(exc):  # not the setup's fault: the turn is handed back (TurnDb)
                raise
            prepared.error = exc
            return prepared
        try:
            prepared.configured = trace_configure(
                trace_id=self.trace.pk, attempt=self.attempt, routing=setup.routing,
                provider_name=setup.provider_name, provider_kind=setup.provider_kind,
                model=setup.model, warnings=setup.warnings, agent_version=setup.agent_version,
                meta=self.trace.meta)
        except TraceNotOwned:
            prepared.configured = None
        return prepared

    # -- the loop and its companions ----------------------------------------------------------------
    async def _loop(self, setup: TurnSetup) -> TurnResult | None:
        loop = asyncio.get_running_loop()
        signals = TurnSignals(settings.REDIS_URL)
        approver = RedisApprover(signals, self.trace.uuid)
        self.recorder.decided_by = approver.decided_by.get
        elapsed = (timezone.now() - self.trace.started_at).total_seconds()
        soft = self.agent.turn_time_limit_s
        timer = loop.call_later(max(soft - elapsed, 0), self._time_up)
        watch = CancelWatch.shared()
        watch.watch(self.trace.uuid, self.cancel)
        companions = [asyncio.ensure_future(self._heartbeat())]
        turn = asyncio.ensure_future(run_turn(
            provider=setup.provider, config=setup.config, history=setup.history,
            user_message=setup.user_text, tools=setup.tools, observer=self.recorder,
            cancel=self.cancel, approver=approver, hooks=setup.hooks,
            resume=self.plan.resume if self.plan is not None else None,
            user_images=setup.user_images, tool_hooks=setup.tool_hooks))
        try:
            done, _ = await asyncio.wait({turn}, timeout=max(self.agent.hard_time_limit_s - elapsed, 1))
            self.finishing = True
            if turn in done:
                return turn.result()
            # Past the hard limit: the loop ignored the soft one (a tool blocking the loop?).
            self._time_up()
            turn.cancel()
            await asyncio.wait({turn}, timeout=1)
            return None
        except Exception:
            logger.exception("trace %s: the turn crashed", self.trace.pk)
            return None
        finally:
            if not turn.done():  # handed back: the run itself was cancelled
                turn.cancel()
                await asyncio.wait({turn}, timeout=STOP_GRACE_S)
            timer.cancel()
            watch.unwatch(self.trace.uuid)
            for task in companions:
                task.cancel()
            await asyncio.gather(*companions, return_exceptions=True)
            await _aclose(setup.provider)
            await _close_mcp_connections()
            await signals.aclose()

    async def _announce_resumption(self, plan: ResumePlan) -> None:
        recorder = self.recorder
        for step in plan.aborted:
            step.trace = self.trace
            await recorder.announce(recorder.announcements.step, step)
        await recorder.record_resume(worker=self.trace.worker, iteration=plan.resume.iteration,
                                     paused_s=plan.paused_s, meta=plan.step_meta(),
                                     name=plan.title)
        logger.info("trace %s: resumed on %s (attempt %s) from %s message(s)", self.trace.pk,
                    self.trace.worker, self.attempt, len(plan.resume.messages))

    def _time_up(self) -> None:
        if self.cancel.cancelled:
            return
        self.stop_cause = self.recorder.stop_cause = "time_limit"
        self.time_limit_at = timezone.now()
        self.cancel.cancel(TIME_LIMIT_MESSAGE.format(seconds=self.agent.turn_time_limit_s))

    # -- handing back -------------------------------------------------------------------------------
    def hand_back(self, reason: str) -> None:
        """Stop this turn and give its trace back to the queue (from any thread)."""
        loop = self.loop
        if loop is None or self.ended.is_set():
            return
        self.handoff_reason = reason
        try:
            loop.call_soon_threadsafe(self._stop_for_hand_back)
        except RuntimeError:  # the loop has closed: the turn is over
            pass

    def _stop_for_hand_back(self) -> None:
        # In the turn's loop, between two of its steps: the recorder is detached before the
        # cancellation, so nothing the cancellation causes is recorded.
        if self.finishing or self.task is None or self.task.done():
            return
        self.stop_cause = "handoff"
        self.recorder.detach()
        self.task.cancel()

    async def _hand_back(self) -> str:
        self.db.on_connection_lost = None  # from here a lost connection is only an error
        try:
            await self.recorder.save_partials()
            self.handed_back = await self.db(
                trace_hand_back, trace_id=self.trace.pk, attempt=self.attempt,
                reason=self.handoff_reason, last_seen=timezone.now())
        except Exception:  # the reaper resumes it once its heartbeat is stale
            logger.exception("trace %s: could not hand the turn back", self.trace.pk)
        if self.handed_back:
            logger.info("trace %s: handed back (%s)", self.trace.pk, self.handoff_reason)
        return HANDED_BACK if self.handed_back else "lost"

    def _lost(self) -> None:
        self.stop_cause = "lost"
        self.cancel.cancel(LOST_REASON)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(settings.TURN_HEARTBEAT_S)
            try:
                beat = await self.db(trace_heartbeat, trace_id=self.trace.pk, attempt=self.attempt)
            except Exception:  # noqa: BLE001 - try again on the next beat
                logger.warning("trace %s: heartbeat failed", self.trace.pk, exc_info=True)
                continue
            if not beat.owned:
                self.recorder.lose()
                return
            if beat.cancel_reason and not self.cancel.cancelled:
                self.stop_cause = "cancelled"
                self.cancel.cancel(beat.cancel_reason)

    # -- the end ------------------------------------------------------------------------------------
    async def _fail(self, message: str, error_kind: str) -> str:
        await self.recorder.record_error(message=message, error_kind=error_kind)
        closed = await self._finish(TurnOutcome(status=Trace.Status.FAILED, error=message,
                                                error_kind=error_kind))
        return closed.trace.status if closed is not None else "lost"

    async def _finish(self, outcome: TurnOutcome) -> ClosedTurn | None:
        """Close the trace with ``outcome`` and announce its messages and final state."""
        self.finishing = True
        recorder = self.recorder
        await recorder.flush()
        if recorder.lost:
            return None
        closed = await self.db(trace_close, trace_id=self.trace.pk, attempt=self.attempt,
                               outcome=outcome, trace=self.trace,
                               open_steps=recorder.has_open_steps() or bool(self.plan))
        if closed is None:
            recorder.lose()
            return None
        recorder.trace = closed.trace
        # The answer goes out with the turn's end (the page renders it from the record).
        await recorder.announce(recorder.announcements.trace, closed.trace)
        if not closed.trace.conversation.ephemeral:  # its person's home and sidebar
            await announce_lists(closed.trace.user_id)
        return closed

    def _outcome(self, result: TurnResult | None, setup: TurnSetup) -> TurnOutcome:
        return turn_outcome(
            result, tool_names=[t.name for t in setup.tools], stop_cause=self.stop_cause,
            time_limit_at=self.time_limit_at,
            limit_message=TIME_LIMIT_MESSAGE.format(seconds=self.agent.turn_time_limit_s),
            last_outcome=self.recorder.last_outcome)


@dataclass
class Prepared:
    """A turn before its loop (``TurnRun._prepare``): the plan it continues from, the steps
    stored already, its setup (or the error that stopped it) and the fields recorded of it
    (None when the trace is no longer this attempt's)."""

    plan: ResumePlan | None
    stored: StoredSteps | None = None
    setup: TurnSetup | None = None
    error: Exception | None = None
    configured: dict[str, Any] | None = field(default_factory=dict)


async def _aclose(provider: Any) -> None:
    try:
        await provider.aclose()
    except Exception:  # noqa: BLE001 - closing pooled connections must not fail a turn
        logger.debug("closing the provider failed", exc_info=True)


async def _close_mcp_connections() -> None:
    """The MCP connections the turn's calls kept (a stdio server's process ends here)."""
    try:
        await mcp_connections_close()
    except Exception:  # noqa: BLE001 - closing kept connections must not fail a turn
        logger.warning("closing the turn's MCP connections failed", exc_info=True)
