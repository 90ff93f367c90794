"""How a forked trace runs in the worker: where its record starts, its replayed tools, and the
model, agent version and system prompt the fork chose.

A fork (``agents.turns.fork``) is a trace with ``forked_from`` and ``fork_seq`` set and what it
changed in ``meta["fork"]``. Its run continues its parent's record up to the fork point
(``upto_seq``: the parent's steps it copies into its history) with the runtime's ``Resume``, as a
turn resumed after its worker died does, then goes on with its own steps. Its tools answer from
the parent's recorded calls (``agents.runtime.replay``). A fork that is itself resumed reads the
parent's steps up to the fork point and then its own.

Nothing here writes: these functions run on the turn's database thread from
``agents.turns.execution`` (``turn_plan``) and ``agents.turns.builder`` (the rest).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from agents.models import Agent, AgentVersion, Provider
from agents.runtime.loop import Resume
from agents.runtime.pricing import TOKEN_FIELDS, Usage
from agents.runtime.replay import RecordedCall, RecordPage, ReplayBook, replay_tools
from agents.runtime.tools import Tool as RuntimeTool
from agents.tools.context import DbRunner, run_sync
from agents.turns.resume import ResumePlan, record_read, resume_from_record, turn_resume_plan
from agents.turns.routing import RouteChoice
from traces.models import Step, StepPayload, Trace, TrajectoryState

Kind, StepStatus = Step.Kind, Step.Status
FORK_META = "fork"
HOOKS_OFF_WARNING = "Hooks do not run in a replay: a fork has no side effects but its tools' new calls."
# Fields of an agent that a version does not set (identity, ownership, bookkeeping).
_NOT_CONFIG = {"id", "uuid", "team", "provider", "created_at", "updated_at", "version"}


def fork_spec(trace: Trace) -> dict[str, Any] | None:
    """What the fork changed (``meta["fork"]``), or None when ``trace`` is no fork."""
    if not trace.forked_from_id:
        return None
    spec = (trace.meta or {}).get(FORK_META)
    return spec if isinstance(spec, dict) else {}


# -- where a fork starts ----------------------------------------------------------------------------
def fork_point(*, trace: Trace, seq: int) -> tuple[Step, int]:
    """The step ``seq`` of ``trace`` to fork from, and the last of its steps the fork copies:
    before a model request (the request is sent again); up to the model request whose answer
    made a tool call or asked for an approval (the call is made again, from the record).
    ``Step.DoesNotExist`` for no such step, ``ValueError`` for a step one cannot fork from."""
    step = Step.objects.get(trace_id=trace.pk, seq=seq)
    if step.kind == Kind.LLM_REQUEST:
        return step, step.seq - 1
    if step.kind in (Kind.TOOL_CALL, Kind.APPROVAL):
        answer = (Step.objects.filter(trace_id=trace.pk, kind=Kind.LLM_REQUEST,
                                      iteration=step.iteration, status=StepStatus.OK,
                                      seq__lt=step.seq)
                  .order_by("-seq").values_list("seq", flat=True).first())
        if answer is None:
            raise ValueError("The model answer that made this call is not recorded, so the run "
                             "cannot be forked here. Fork from its model request instead.")
        return step, answer
    raise ValueError("A run can be forked from a model request, a tool call or an approval; "
                     "pick one of those steps.")


def fork_resume(trace: Trace, spec: dict[str, Any]) -> Resume:
    """The record the fork continues: its parent's steps up to the fork point, then its own.
    Its usage is its own (the parent's requests are not paid for again)."""
    own = record_read(trace_id=trace.pk)
    record = record_read(trace_id=trace.forked_from_id, upto_seq=int(spec.get("upto_seq") or 0))
    resume = resume_from_record(record.extend(own), state=None)
    state = (TrajectoryState.objects.filter(trace_id=trace.pk).order_by("-iteration")
             .values_list("fields", flat=True).first())
    if state is None and resume.messages:
        # The parent's state before the iteration the fork takes up (which records its own).
        state = (TrajectoryState.objects.filter(trace_id=trace.forked_from_id,
                                                iteration__lt=resume.iteration)
                 .order_by("-iteration").values_list("fields", flat=True).first())
    tokens = [sum(getattr(step, name) or 0 for step in own.rows if step.kind == Kind.LLM_REQUEST)
              for name in TOKEN_FIELDS]
    return dataclasses.replace(resume, usage=Usage(*tokens),
                               state=dict(state) if isinstance(state, dict) else None)


def turn_plan(*, trace: Trace, attempt: int) -> ResumePlan | None:
    """What attempt ``attempt`` of ``trace`` continues from: a fork's record, a resumed turn's
    record (``turn_resume_plan``), or None for a turn that starts afresh."""
    plan = turn_resume_plan(trace=trace, attempt=attempt)
    spec = fork_spec(trace)
    if spec is None:
        return plan
    resume = fork_resume(trace, spec)
    if plan is not None:
        plan.resume = resume
        return plan
    parent = (Trace.objects.filter(pk=trace.forked_from_id).values_list("uuid", flat=True).first())
    label = parent.hex[:8] if parent else "a deleted trace"
    return ResumePlan(resume=resume, reason="fork",
                      title=f"forked from {label} at step {trace.fork_seq}",
                      extra={"forked_from": parent.hex if parent else None,
                             "fork_seq": trace.fork_seq, "upto_seq": spec.get("upto_seq")})


# -- the recorded calls -----------------------------------------------------------------------------
def fork_book(trace: Trace, spec: dict[str, Any], *, db: DbRunner = run_sync) -> ReplayBook:
    """The parent's tool calls that ran (not denied, declined, skipped or cut off), with their
    results, read a page at a time when the fork's calls need them (``db`` runs the reads from
    the turn's event loop). Those in the fork's copied history answer last."""
    return ReplayBook(_ParentCalls(trace.forked_from_id, db), upto=int(spec.get("upto_seq") or 0),
                      allow_new=bool(spec.get("allow_new_tool_calls")))


class _ParentCalls:
    """The parent's record of tool calls, read by page (``agents.runtime.replay.RecordPages``)."""

    def __init__(self, parent_id: int | None, db: DbRunner) -> None:
        self.parent_id = parent_id
        self.db = db
        self.declined: set[str] | None = None

    async def __call__(self, seq: int, backwards: bool, limit: int) -> RecordPage:
        return await self.db(self.page, seq, backwards, limit)

    def page(self, seq: int, backwards: bool, limit: int) -> RecordPage:
        if self.declined is None:
            self.declined = set(Step.objects.filter(trace_id=self.parent_id, kind=Kind.APPROVAL,
                                                    success=False).values_list("call_id", flat=True))
        steps = Step.objects.filter(trace_id=self.parent_id, kind=Kind.TOOL_CALL)
        steps = (steps.filter(seq__lt=seq).order_by("-seq") if backwards
                 else steps.filter(seq__gt=seq).order_by("seq"))
        rows = list(steps.values_list("pk", "seq", "name", "call_id", "status", "success", "error",
                                      "meta")[:limit])
        ran = [r for r in rows if r[4] in (StepStatus.OK, StepStatus.ERROR) and _ran(r[7])
               and r[3] not in self.declined]
        payloads = dict(((step_id, kind), content) for step_id, kind, content in
                        StepPayload.objects.filter(
                            step_id__in=[r[0] for r in ran],
                            kind__in=[StepPayload.Kind.ARGUMENTS, StepPayload.Kind.OUTPUT])
                        .values_list("step_id", "kind", "content"))
        calls = []
        for pk, step_seq, name, _, _, success, error, _ in ran:
            arguments = _json_object(payloads.get((pk, StepPayload.Kind.ARGUMENTS)))
            if arguments is not None:
                calls.append(RecordedCall(
                    name=name, arguments=arguments,
                    output=payloads.get((pk, StepPayload.Kind.OUTPUT)) or "",
                    success=bool(success), error=error, seq=step_seq))
        return calls, (rows[-1][1] if len(rows) == limit else None)


def _ran(meta: dict[str, Any] | None) -> bool:
    permission = (meta or {}).get("permission") or {}
    outcome = permission.get("outcome") if isinstance(permission, dict) else None
    return outcome in ("allow", "ask")


def _json_object(content: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(content) if content else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- the fork's agent, model and tools --------------------------------------------------------------
def fork_agent(agent: Agent, trace: Trace) -> Agent:
    """The agent as the fork runs it: at the version it chose (the configuration fields and the
    provider of that version; never saved), and without saving memories."""
    spec = fork_spec(trace)
    if spec is None:
        return agent
    agent = copy.copy(agent)
    number = spec.get("agent_version")
    if number and number != agent.version:
        version = AgentVersion.objects.filter(agent_id=agent.pk, number=number).first()
        if version is not None:
            agent_apply_snapshot(agent, version.snapshot)
            agent.version = version.number
    agent.memory_auto_save = False  # a replay stores nothing of its own
    return agent


def agent_apply_snapshot(agent: Agent, snapshot: dict[str, Any]) -> None:
    """The configuration ``snapshot`` (an ``AgentVersion``'s) onto ``agent`` in memory."""
    for f in Agent._meta.concrete_fields:
        if f.name not in _NOT_CONFIG and f.name in snapshot:
            setattr(agent, f.attname, f.to_python(snapshot[f.name]))
    name = snapshot.get("provider")
    if name and name != agent.provider.name:
        provider = Provider.objects.filter(team_id=agent.team_id, name=name).first()
        if provider is not None:
            agent.provider = provider


def fork_route(*, trace: Trace, agent: Agent) -> RouteChoice | None:
    """The provider and model the fork chose, or None to route as any turn does."""
    spec = fork_spec(trace)
    if not spec or not (spec.get("model") or spec.get("provider")):
        return None
    provider = agent.provider
    if spec.get("provider"):
        provider = Provider.objects.filter(team_id=agent.team_id, name=spec["provider"]).first() or provider
    model = str(spec.get("model") or agent.model)
    return RouteChoice(provider, model, {
        "rule": None, "hint": None, "matched_keyword": None, "matched_pattern": None,
        "reason": f"The fork runs on {provider.name} / {model}.",
        "provider": provider.name, "model": model,
    })


def fork_tools(*, trace: Trace, tools: list[RuntimeTool], db: DbRunner = run_sync
               ) -> tuple[list[RuntimeTool], list[str]]:
    """The turn's tools as the fork calls them (replayed from its parent's record, read
    through ``db``), and a warning naming the tools of the fork's version that could not be
    offered. ``tools`` are the version's tools when the fork chose one (the team's tools of
    those names, ``builder.runtime_tools``), whether or not the agent still has them."""
    spec = fork_spec(trace)
    if spec is None:
        return tools, []
    warnings: list[str] = []
    names = spec.get("tools")
    if isinstance(names, list):
        gone = sorted(set(names) - {t.name for t in tools})
        if gone:
            warnings.append(f"Tools of the chosen version that the team no longer has, or has "
                            f"turned off, were left out: {', '.join(gone)}.")
    return replay_tools(tools, fork_book(trace, spec, db=db)), warnings
