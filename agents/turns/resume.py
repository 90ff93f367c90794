"""Continuing a stored turn from its record: after its worker died or handed it back.

The database holds every step of a turn: each model request with the assistant message its
answer became (``StepPayload.Kind.MESSAGE``), each tool call with its result. ``turn_resume_plan``
rebuilds from them the runtime's ``Resume``: the messages the turn had added, the results of the
last answer's calls that were recorded, and the calls that were running when the turn stopped.
``run_turn(resume=...)`` goes on from there, so a completed tool call is never run again.

A model request that was streaming when the turn stopped is ended here as an aborted attempt:
an error step keeping the text it had streamed, with its tokens estimated (the request's input
from the runtime's estimate at its start, the output counted from the text) and priced, because
the provider was paid for it. The runtime then sends the request again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.runtime.loop import Resume
from agents.runtime.messages import Message as RuntimeMessage
from agents.runtime.messages import Role, ToolResultBlock
from agents.runtime.pricing import TOKEN_FIELDS, Usage
from agents.runtime.tokenizer import count_tokens
from traces.costs.pricing import price_table_for
from traces.models import Step, StepPayload, Trace, TrajectoryState
from traces.record import services
from traces.record.recorder import price_fields

logger = logging.getLogger(__name__)
Kind, StepStatus = Step.Kind, Step.Status

CUT_OFF_ERROR = ("Cut off: the worker running this turn stopped while this request was being "
                 "answered. It was sent again when the turn resumed; its tokens are estimated.")
BLOCKED_PREFIX = "[Loop Detection — BLOCKED] "


@dataclass
class ResumePlan:
    """What a resumed attempt continues from, and what the resumption step says."""

    resume: Resume
    aborted: list[Step] = field(default_factory=list)
    reason: str = ""
    from_worker: str = ""
    paused_s: float | None = None
    # The resumption step's name when it is not "resumed on <worker>" (a fork's first run).
    title: str = ""
    # What the step's meta says besides (a fork: its parent and fork point).
    extra: dict[str, Any] = field(default_factory=dict)

    def step_meta(self) -> dict[str, Any]:
        resume = self.resume
        return {"reason": self.reason, "from_worker": self.from_worker,
                "paused_s": round(self.paused_s, 3) if self.paused_s is not None else None,
                "messages": len(resume.messages), "iteration": resume.iteration,
                "recorded_calls": len(resume.recorded),
                "interrupted_calls": sorted(resume.interrupted),
                "aborted_requests": [s.seq for s in self.aborted], **self.extra}


def turn_resume_plan(*, trace: Trace, attempt: int, now: datetime | None = None) -> ResumePlan | None:
    """The plan for attempt ``attempt`` of ``trace`` when an earlier attempt recorded steps;
    None for a turn that starts afresh. Ends the earlier attempt's cut-off model requests
    (``CUT_OFF_ERROR``) on the way. Runs on the turn's database thread."""
    now = now or timezone.now()
    if attempt <= 1 or not Step.objects.filter(trace_id=trace.pk).exists():
        return None
    handed = (trace.meta or {}).get("resume") or {}
    last_seen = parse_datetime(handed["last_seen"]) if handed.get("last_seen") else None
    aborted = requests_end_cut_off(trace=trace, attempt=attempt)
    return ResumePlan(resume=resume_from_steps(trace_id=trace.pk), aborted=aborted,
                      reason=str(handed.get("reason") or "worker_lost"),
                      from_worker=str(handed.get("from_worker") or ""),
                      paused_s=(now - last_seen).total_seconds() if last_seen else None)


def resume_from_steps(*, trace_id: int, upto_seq: int | None = None) -> Resume:
    """The runtime's ``Resume`` for the trace as recorded (up to step ``upto_seq``, when given):
    the assistant messages of its answered model requests in order, each but the last with the
    results of its calls; the last one's recorded results and running calls are left for the
    runtime to settle."""
    state = (TrajectoryState.objects.filter(trace_id=trace_id).order_by("-iteration")
             .values_list("fields", flat=True).first())
    return resume_from_record(record_read(trace_id=trace_id, upto_seq=upto_seq), state=state)


# What continuing a record reads of a step: rows of ``values_list(named=True)`` with these.
RECORD_FIELDS = ("pk", "seq", "kind", "status", "iteration", "call_id", "success", "name",
                 *TOKEN_FIELDS)


@dataclass
class Record:
    """A trace's steps as continuing it reads them (``record_read``): the rows in order, the
    answers' messages and the calls' results by step id, and the meta of the calls the loop
    detector blocked (the only meta that changes a result)."""

    rows: list[Any] = field(default_factory=list)
    messages: dict[int, str] = field(default_factory=dict)
    outputs: dict[int, str] = field(default_factory=dict)
    blocked: dict[int, dict[str, Any]] = field(default_factory=dict)

    def extend(self, other: Record) -> Record:
        """This record, then ``other`` (a fork's record continues its parent's)."""
        self.rows.extend(other.rows)
        self.messages.update(other.messages)
        self.outputs.update(other.outputs)
        self.blocked.update(other.blocked)
        return self


def record_read(*, trace_id: int, upto_seq: int | None = None) -> Record:
    """The steps of a trace (up to step ``upto_seq``) as ``resume_from_record`` reads them: the
    needed columns and payloads in a few queries, no model instances (a record of thousands of
    steps is read in a few dozen milliseconds)."""
    steps = Step.objects.filter(trace_id=trace_id)
    payloads = StepPayload.objects.filter(step__trace_id=trace_id)
    if upto_seq is not None:
        steps = steps.filter(seq__lte=upto_seq)
        payloads = payloads.filter(step__seq__lte=upto_seq)
    record = Record(rows=list(steps.order_by("seq").values_list(*RECORD_FIELDS, named=True)))
    for kind, into in ((StepPayload.Kind.MESSAGE, record.messages),
                       (StepPayload.Kind.OUTPUT, record.outputs)):
        into.update(payloads.filter(kind=kind).values_list("step_id", "content"))
    record.blocked = dict(steps.filter(kind=Kind.TOOL_CALL, meta__loop_detection__level="block")
                          .values_list("pk", "meta"))
    return record


def resume_from_record(record: Record, *, state: Any = None) -> Resume:
    """``resume_from_steps`` for ``record`` (``record_read``; it may join more than one trace's:
    a fork's record continues its parent's), with ``state`` as the last state."""
    answers: list[RuntimeMessage] = []
    iteration = 0
    tools: dict[str, Any] = {}
    tokens = [0] * len(TOKEN_FIELDS)
    for step in record.rows:
        if step.kind == Kind.LLM_REQUEST:
            tokens = [total + (getattr(step, name) or 0)
                      for total, name in zip(tokens, TOKEN_FIELDS, strict=True)]
            if step.status == StepStatus.OK:
                message = _message(record.messages.get(step.pk))
                if message is not None:
                    answers.append(message)
                    iteration = step.iteration
        elif step.kind == Kind.TOOL_CALL and step.call_id:
            tools[step.call_id] = step
    messages: list[RuntimeMessage] = []
    recorded: dict[str, ToolResultBlock] = {}
    interrupted: set[str] = set()
    for index, answer in enumerate(answers):
        messages.append(answer)
        uses = answer.tool_uses
        results = []
        for use in uses:
            step = tools.get(use.id)
            if step is None:
                continue
            if step.status in (StepStatus.OK, StepStatus.ERROR):
                results.append(_result(step, record.outputs.get(step.pk), record.blocked.get(step.pk)))
            else:
                interrupted.add(use.id)
        if index < len(answers) - 1 and uses:
            # An earlier answer's calls were all settled before the next request was sent.
            if len(results) < len(uses):
                answered = {r.tool_use_id for r in results}
                results.extend(ToolResultBlock(use.id, services.STEP_INTERRUPTED, True, use.name)
                               for use in uses if use.id not in answered)
            if len(results) > 1:
                order = {use.id: n for n, use in enumerate(uses)}
                results.sort(key=lambda r: order.get(r.tool_use_id, 0))
            messages.append(RuntimeMessage.tool_results(results))
        elif index == len(answers) - 1:
            recorded = {r.tool_use_id: r for r in results}
    return Resume(messages=messages, iteration=iteration,
                  recorded=recorded, interrupted=frozenset(interrupted), usage=Usage(*tokens),
                  state=dict(state) if isinstance(state, dict) else None)


def _message(content: str | None) -> RuntimeMessage | None:
    if not content:
        return None
    try:
        message = RuntimeMessage.from_dict(json.loads(content))
    except (KeyError, TypeError, ValueError):
        logger.warning("a recorded answer cannot be read back; its request is sent again")
        return None
    return message if message.role is Role.ASSISTANT else None


def _result(step: Any, output: str | None, meta: dict[str, Any] | None) -> ToolResultBlock:
    output = output or ""
    detection = (meta or {}).get("loop_detection") or {}
    if detection.get("level") == "block":
        output = BLOCKED_PREFIX + str(detection.get("message", ""))
    return ToolResultBlock(step.call_id, output, not step.success, step.name)


def requests_end_cut_off(*, trace: Trace, attempt: int, error: str = CUT_OFF_ERROR,
                         resumed: bool = True) -> list[Step]:
    """End the model requests left running with estimated, priced usage: as aborted attempts
    (the turn resumes and sends the request again), or, with ``resumed=False``, as the requests
    the turn ended under (the reaper ends it), so that their cost is counted and their audit
    shows what they had streamed and cost."""
    ended = []
    running = list(Step.objects.filter(trace_id=trace.pk, kind=Kind.LLM_REQUEST,
                                       status=StepStatus.RUNNING))
    table = price_table_for(trace.team_id, with_providers=True) if running else None
    for step in running:
        partial = (StepPayload.objects.filter(step=step, kind=StepPayload.Kind.PARTIAL)
                   .values_list("content", flat=True).first() or "")
        meta = dict(step.meta or {})
        usage = Usage(input_tokens=int(meta.get("estimated_input_tokens") or 0),
                      output_tokens=count_tokens(partial, step.model) if partial else 0)
        kind = table.kind_of(team_id=trace.team_id, provider_name=step.provider) or trace.provider_kind
        priced = table.cost(provider_kind=kind, model=step.model, usage=usage,
                            team_id=trace.team_id, at=step.started_at)
        recorded = price_fields(priced)
        meta.update(recorded.pop("meta"), usage_estimated=True, partial_chars=len(partial),
                    outcome="interrupted")
        if resumed:
            meta["aborted"] = True
        values = {"status": StepStatus.ERROR, "success": False, "error": error,
                  "meta": meta, **recorded, **usage.to_dict()}
        changed = services.step_record(trace_id=trace.pk, attempt=attempt, seq=step.seq,
                                       values=values)
        if changed is not None:
            ended.append(changed)
    return ended

