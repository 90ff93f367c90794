"""A turn as OpenTelemetry spans, by the GenAI semantic conventions, built from what is stored.

* ``invoke_agent {agent}`` (INTERNAL): the turn, from its start to its end. Its parent is the
  caller's span when the request carried a ``traceparent``. Events: the trajectory state of
  each iteration (``agentsite.trajectory_state``), a resume on another worker, the error that
  ended it (``exception``).
* ``chat {model}`` (CLIENT): one model request, with usage by bucket, the price it was costed
  with and, as events, the retries, failovers and restarted streams inside it.
* ``execute_tool {tool}`` (INTERNAL): one tool call; an MCP call adds ``mcp.*``.
* ``await_approval {tool}``, ``compact_history``, ``hook {name}`` (INTERNAL): a person's
  decision on a call, a compaction of the history, a hook's run; a retry recorded after its
  request had ended is a ``retry {provider}`` span of its own.

Every span nests under the turn's span; times are the steps' recorded times. Ids come from
``ids`` (stable: a step exported twice, or by a backfill, is the same span). Content (prompts,
answers, arguments, results) follows the exporter's ``content.Policy``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.urls import reverse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agents.runtime.providers.base import Outcome, outcome_of

from ..costs.pricing import PriceTable, price_table_for
from ..models import Step, StepPayload, Trace, TrajectoryState
from . import content as gen
from .config import ExportConfig
from .ids import ROOT_KEY, Parent, parse_traceparent, span_id_for, trace_id_for

SCOPE = InstrumentationScope("agentsite.traces.export", "1.0",
                             "https://opentelemetry.io/schemas/1.37.0")
Kind = Step.Kind
# gen_ai.provider.name: the conventions' names for the kinds that have one.
PROVIDER_NAMES = {"openai": "openai", "anthropic": "anthropic", "demo": "agentsite.demo"}
FINISH = {Outcome.COMPLETE: "stop", Outcome.TOOL_USE: "tool_call", Outcome.LENGTH: "length",
          Outcome.FILTERED: "content_filter", Outcome.REFUSAL: "content_filter"}
FAILED = (Trace.Status.FAILED, Trace.Status.TIMED_OUT, Trace.Status.INTERRUPTED)
# A turn that did not end with its answer has ``error.type`` (the error's kind; ``cancelled``
# for a stop, so a query for unfinished turns finds them all); a failed one's status is also
# an error, a stopped one's stays unset: a person's stop is not a failure of the turn.
ENDED_SHORT = (*FAILED, Trace.Status.CANCELLED)


def ns(moment: datetime | None) -> int:
    return int(moment.timestamp() * 1_000_000_000) if moment is not None else 0


def resource_for(config: ExportConfig, team_uuid: str) -> Resource:
    return Resource.create({"service.name": config.service_name,
                            "openinference.project.name": config.service_name,
                            "agentsite.team.id": team_uuid})


def _usage(obj: Any) -> dict[str, int]:
    """Usage in the conventions' terms: input counts every prompt token, cached included."""
    return {"gen_ai.usage.input_tokens": obj.prompt_tokens,
            "gen_ai.usage.output_tokens": obj.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": obj.cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": obj.cache_write_tokens,
            "gen_ai.usage.reasoning.output_tokens": obj.reasoning_tokens}


def _usd(amount: Decimal | None) -> float:
    return float(amount or 0)


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    """Drop empty values: an attribute is sent when it says something."""
    return {k: v for k, v in attributes.items() if v is not None and v != "" and v != []}


class Turn:
    """What every span of one turn shares, and reads of its stored record."""

    def __init__(self, trace: Trace, config: ExportConfig, *, prices: PriceTable | None = None) -> None:
        self.trace = trace
        self.config = config
        self.policy = config.policy
        self.parent: Parent | None = parse_traceparent((trace.meta or {}).get("traceparent"))
        self.trace_id = trace_id_for(trace.uuid, self.parent)
        self.root_id = span_id_for(trace.uuid, ROOT_KEY)
        self.resource = resource_for(config, trace.team.uuid.hex)
        self.prices = prices
        agent = trace.agent
        self.agent_name = agent.name if agent is not None else "agent"
        self.common = _clean({
            "gen_ai.agent.id": agent.uuid.hex if agent is not None else None,
            "gen_ai.agent.name": self.agent_name,
            "gen_ai.agent.version": str(trace.agent_version) if trace.agent_version else None,
            "gen_ai.conversation.id": trace.conversation.uuid.hex,
        })

    # -- reads ------------------------------------------------------------------------------------
    def provider_kind(self, provider_name: str) -> str:
        if self.prices is None:
            self.prices = _provider_table(self.trace.team_id)
        return (self.prices.kind_of(team_id=self.trace.team_id, provider_name=provider_name)
                or self.trace.provider_kind or provider_name)

    def provider(self, provider_name: str) -> str:
        kind = self.provider_kind(provider_name)
        return PROVIDER_NAMES.get(kind, kind or "_OTHER")

    def url(self) -> str:
        path = reverse("trace_detail", args=[self.trace.uuid])
        return f"{settings.SITE_URL}{path}" if settings.SITE_URL else path

    # -- span plumbing ----------------------------------------------------------------------------
    def context(self, span_id: int) -> SpanContext:
        return SpanContext(self.trace_id, span_id, is_remote=False,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))

    def span(self, name: str, *, key: str, kind: SpanKind, start: datetime | None,
             end: datetime | None, attributes: dict[str, Any], events: Iterable[Event] = (),
             error: str = "", parent: SpanContext | None = None,
             root: bool = False) -> ReadableSpan:
        """A span of the turn: under ``parent``, by default the turn's span (``root``: the
        turn's span itself, under ``parent`` when the caller sent one)."""
        start_ns = ns(start)
        end_ns = max(ns(end), start_ns)
        status = Status(StatusCode.ERROR, error[:1000]) if error else Status(StatusCode.UNSET)
        return ReadableSpan(
            name=name, context=self.context(span_id_for(self.trace.uuid, key)),
            parent=parent if root else (parent or self.context(self.root_id)),
            resource=self.resource,
            attributes=_clean({**self.common, **attributes}), events=list(events), kind=kind,
            status=status, start_time=start_ns, end_time=end_ns, instrumentation_scope=SCOPE)


def _provider_table(team_id: int) -> PriceTable:
    """The team's price table with its providers' kinds (for ``gen_ai.provider.name``)."""
    return price_table_for(team_id, with_providers=True)


def step_end(step: Step) -> datetime:
    return step.started_at + timedelta(milliseconds=step.duration_ms or 0)


def step_key(step: Step) -> str:
    """The recorder's key of a step (its span's id is made from it)."""
    return str((step.meta or {}).get("key") or f"step:{step.seq}")


# -- the turn ---------------------------------------------------------------------------------------
def root_span(turn: Turn, *, states: Iterable[TrajectoryState], steps: Iterable[Step]) -> ReadableSpan:
    """The turn's span, once it has ended."""
    trace = turn.trace
    routing = trace.routing if isinstance(trace.routing, dict) else {}
    events = [_state_event(turn, s) for s in states]
    for step in steps:
        if step.kind == Kind.RESUME:
            events.append(Event("agentsite.resumed", _clean({
                "agentsite.step.seq": step.seq, "agentsite.resume.worker": step.name,
                "agentsite.iteration": step.iteration}), ns(step.started_at)))
        elif step.kind == Kind.ERROR:
            events.append(Event("exception", _clean({
                "exception.type": step.name or "error", "exception.message": step.error[:2000]}),
                ns(step.started_at)))
    start = trace.started_at or trace.created_at
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": turn.provider(trace.provider_name) if trace.provider_name else None,
        "gen_ai.request.model": trace.model,
        **_usage(trace),
        "agentsite.trace.id": trace.uuid.hex,
        "agentsite.trace.url": turn.url(),
        "agentsite.trace.status": trace.status,
        "agentsite.cost_usd": _usd(trace.cost_usd),
        "agentsite.iterations": trace.iterations,
        "agentsite.steps": trace.step_count,
        "agentsite.attempts": trace.attempts,
        "agentsite.queued_ms": (int((start - trace.created_at).total_seconds() * 1000)
                                if trace.started_at else None),
        "agentsite.routing.rule": str(routing.get("rule") or ""),
        "agentsite.routing.reason": str(routing.get("reason") or ""),
        "agentsite.routing.matched_keyword": str(routing.get("matched_keyword") or ""),
        "agentsite.provider": trace.provider_name,
        "agentsite.unpriced_calls": trace.unpriced_calls or None,
        "agentsite.estimated_calls": trace.estimated_calls or None,
        "agentsite.api_key": trace.api_key.prefix if trace.api_key_id and trace.api_key else None,
        "error.type": (trace.error_kind or trace.status) if trace.status in ENDED_SHORT else None,
    }
    if turn.policy.on and trace.answer:
        attributes["agentsite.answer"] = turn.policy.text(trace.answer)
    error = trace.error if trace.status in FAILED else ""
    parent = (SpanContext(turn.parent.trace_id, turn.parent.span_id, is_remote=True,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED)) if turn.parent else None)
    return turn.span(f"invoke_agent {turn.agent_name}", key=ROOT_KEY, kind=SpanKind.INTERNAL,
                     start=start, end=trace.finished_at or start, attributes=attributes,
                     events=events, error=error or "", parent=parent, root=True)


def _state_event(turn: Turn, state: TrajectoryState) -> Event:
    attributes: dict[str, Any] = {"agentsite.iteration": state.iteration,
                                  "agentsite.trajectory.changed": [str(c) for c in state.changed or []]}
    if turn.policy.on:
        attributes["agentsite.trajectory.state"] = turn.policy.json(state.fields)
    return Event("agentsite.trajectory_state", _clean(attributes), ns(state.created_at))


# -- one step -------------------------------------------------------------------------------------
def step_spans(turn: Turn, step: Step, *, payloads: dict[str, Any], retries: Iterable[Step] = (),
               history: list[dict[str, Any]] | None = None,
               tool_specs: list[dict[str, Any]] | None = None,
               request_key: str | None = None) -> list[ReadableSpan]:
    """The span of a finished step (none for the kinds that are events of another span).

    ``payloads``: the step's stored payloads by kind, parsed. A model request's ``retries``
    (retry and restart steps that name it) become its events; with content on, ``history`` is
    every message the request sent and ``tool_specs`` the definitions of its tools. A retry
    step's ``request_key`` is the key of the request it belongs to (its span's parent)."""
    if step.kind == Kind.LLM_REQUEST:
        return [_chat_span(turn, step, payloads, retries, history, tool_specs)]
    if step.kind == Kind.TOOL_CALL:
        return [_tool_span(turn, step, payloads)]
    if step.kind == Kind.APPROVAL:
        return [_approval_span(turn, step)]
    if step.kind == Kind.COMPACTION:
        return [turn.span("compact_history", key=step_key(step), kind=SpanKind.INTERNAL,
                          start=step.started_at, end=step_end(step), attributes={
                              "agentsite.step.seq": step.seq, "agentsite.iteration": step.iteration,
                              "agentsite.compaction.reason": (step.meta or {}).get("reason"),
                              "agentsite.compaction.removed_messages":
                                  (step.meta or {}).get("removed_message_count")})]
    if step.kind == Kind.HOOK:
        meta = step.meta or {}
        return [turn.span(f"hook {step.name}", key=step_key(step), kind=SpanKind.INTERNAL,
                          start=step.started_at, end=step_end(step),
                          error=_content_error(turn, step.error, "The hook refused."), attributes={
                              "agentsite.step.seq": step.seq, "agentsite.hook.name": step.name,
                              "agentsite.hook.event": meta.get("event"),
                              "agentsite.hook.kind": meta.get("hook_kind"),
                              "agentsite.hook.decision": meta.get("decision"),
                              "gen_ai.tool.name": meta.get("tool") or None,
                              "gen_ai.tool.call.id": step.call_id or None})]
    if step.kind == Kind.RETRY:
        return [_retry_span(turn, step, request_key)]
    return []  # resume and error steps are events of the turn's span


def _retry_attributes(step: Step) -> dict[str, Any]:
    meta = step.meta or {}
    return _clean({
        "agentsite.step.seq": step.seq, "agentsite.retry.provider": step.provider,
        "agentsite.retry.model": step.model, "agentsite.retry.attempt": meta.get("attempt"),
        "agentsite.retry.backoff_ms": meta.get("backoff_ms"),
        "agentsite.retry.failover": bool(meta.get("failover")),
        "agentsite.retry.restart": bool(meta.get("restart")),
        "agentsite.retry.next_provider": meta.get("next_provider") or None,
        "agentsite.retry.next_model": meta.get("next_model") or None,
        "error.type": "restart" if meta.get("restart") else "retry",
        "exception.message": step.error[:2000],
    })


def _retry_span(turn: Turn, step: Step, request_key: str | None) -> ReadableSpan:
    parent = turn.context(span_id_for(turn.trace.uuid, request_key)) if request_key else None
    return turn.span(f"retry {step.provider}".strip(), key=step_key(step), kind=SpanKind.INTERNAL,
                     start=step.started_at, end=step_end(step), attributes=_retry_attributes(step),
                     error=step.error, parent=parent)


def _chat_span(turn: Turn, step: Step, payloads: dict[str, Any], retries: Iterable[Step],
               history: list[dict[str, Any]] | None,
               tool_specs: list[dict[str, Any]] | None) -> ReadableSpan:
    meta = step.meta or {}
    request = payloads.get(StepPayload.Kind.REQUEST) or {}
    response = payloads.get(StepPayload.Kind.RESPONSE) or {}
    request = request if isinstance(request, dict) else {}
    response = response if isinstance(response, dict) else {}
    stop_reason = meta.get("stop_reason") or response.get("stop_reason")
    first_ms = meta.get("first_chunk_ms", meta.get("first_token_ms"))
    price = step.price if step.price_id else None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": turn.provider(step.provider),
        "gen_ai.request.model": request.get("model") or step.model,
        "gen_ai.response.model": response.get("model") or step.model,
        "gen_ai.response.id": response.get("id") or None,
        "gen_ai.response.finish_reasons": [str(stop_reason)] if stop_reason else None,
        "gen_ai.request.stream": bool(request["stream"]) if "stream" in request else None,
        "gen_ai.response.time_to_first_chunk": (round(first_ms / 1000, 6)
                                                if isinstance(first_ms, int | float) else None),
        "gen_ai.request.temperature": request.get("temperature"),
        "gen_ai.request.max_tokens": request.get("max_tokens"),
        **_usage(step),
        "agentsite.step.seq": step.seq,
        "agentsite.iteration": step.iteration,
        "agentsite.provider": step.provider,
        "agentsite.cost_usd": _usd(step.cost_usd),
        "agentsite.price.id": price.uuid.hex if price is not None else None,
        "agentsite.price.model": price.model if price is not None else None,
        "agentsite.price.version": price.version if price is not None else None,
        "agentsite.price.scope": ("team" if price.team_id else "global") if price is not None else None,
        "agentsite.price.match": step.price_match or None,
        "agentsite.unpriced": True if meta.get("unpriced") else None,
        "agentsite.usage_estimated": True if meta.get("usage_estimated") else None,
        "agentsite.outcome": meta.get("outcome"),
        "agentsite.tools_available": [str(t) for t in meta.get("tools_available") or []],
        "error.type": "provider_error" if step.status == Step.Status.ERROR else None,
    }
    policy = turn.policy
    if policy.on:
        system = gen.system_instructions(request.get("system") or [])
        if system:
            attributes["gen_ai.system_instructions"] = policy.json(system)
        attributes["gen_ai.input.messages"] = policy.json(gen.messages(
            history if history is not None else request.get("messages") or []))
        if tool_specs:
            attributes["gen_ai.tool.definitions"] = policy.json(gen.tool_definitions(tool_specs))
        if isinstance(response.get("message"), dict):
            finish = FINISH.get(outcome_of(stop_reason), "stop")
            attributes["gen_ai.output.messages"] = policy.json(
                [gen.output_message(response["message"], finish)])
    events = [Event("agentsite.retry", _retry_attributes(r), ns(r.started_at)) for r in retries]
    return turn.span(f"chat {attributes['gen_ai.request.model']}", key=step_key(step),
                     kind=SpanKind.CLIENT, start=step.started_at, end=step_end(step),
                     attributes=attributes, events=events, error=step.error)


def tool_type(meta: dict[str, Any]) -> str:
    """``extension``: the agent calls out (an MCP server, an HTTP API); ``datastore``: the
    team's memory; ``function``: a built-in tool run in the worker. As the tool said on its
    step (``Tool.step_meta``, whatever the call's outcome); older steps by what they hold."""
    if meta.get("tool_type") in ("function", "extension", "datastore"):
        return meta["tool_type"]
    if meta.get("mcp") or meta.get("http"):
        return "extension"
    if meta.get("memory"):
        return "datastore"
    return "function"


def _tool_span(turn: Turn, step: Step, payloads: dict[str, Any]) -> ReadableSpan:
    meta = step.meta or {}
    mcp = meta.get("mcp") if isinstance(meta.get("mcp"), dict) else {}
    permission = meta.get("permission") if isinstance(meta.get("permission"), dict) else {}
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": step.name,
        "gen_ai.tool.call.id": step.call_id,
        "gen_ai.tool.type": tool_type(meta),
        "mcp.method.name": mcp.get("method") if mcp else None,
        "mcp.session.id": mcp.get("session_id") if mcp else None,
        "mcp.protocol.version": mcp.get("protocol_version") if mcp else None,
        "agentsite.mcp.server": mcp.get("server") if mcp else None,
        "agentsite.mcp.tool": mcp.get("tool") if mcp else None,
        "agentsite.step.seq": step.seq,
        "agentsite.iteration": step.iteration,
        "agentsite.tool.policy": permission.get("policy"),
        "agentsite.tool.permission": permission.get("outcome"),
        "agentsite.tool.approval_wait_ms": meta.get("approval_waited_ms") or meta.get("approval_wait_ms"),
        "agentsite.tool.output_chars": meta.get("output_chars"),
        "agentsite.tool.loop_detection": (meta.get("loop_detection") or {}).get("level"),
        "error.type": ("tool_error" if step.status == Step.Status.ERROR else None),
    }
    policy = turn.policy
    if policy.on:
        if StepPayload.Kind.ARGUMENTS in payloads:
            attributes["gen_ai.tool.call.arguments"] = policy.json(payloads[StepPayload.Kind.ARGUMENTS])
        if StepPayload.Kind.OUTPUT in payloads:
            attributes["gen_ai.tool.call.result"] = policy.text(payloads[StepPayload.Kind.OUTPUT])
    # A call recorded before its start left out the approval wait kept it as approval_wait_ms.
    start = step.started_at + timedelta(milliseconds=float(meta.get("approval_wait_ms") or 0))
    return turn.span(f"execute_tool {step.name}", key=step_key(step), kind=SpanKind.INTERNAL,
                     start=start, end=start + timedelta(milliseconds=step.duration_ms or 0),
                     attributes=attributes,
                     error=_content_error(turn, step.error, "The tool call failed."))


def _content_error(turn: Turn, error: str, plain: str) -> str:
    """A tool's or a hook's error may quote what it was given or what it read: with content
    off, the span says only that it failed."""
    if not error:
        return ""
    return turn.policy.text(error) if turn.policy.on else plain


def _approval_span(turn: Turn, step: Step) -> ReadableSpan:
    meta = step.meta or {}
    decision = "approved" if step.success else str(meta.get("reason") or "denied")
    return turn.span(f"await_approval {step.name}", key=step_key(step), kind=SpanKind.INTERNAL,
                     start=step.started_at, end=step_end(step), error="" if step.success else step.error,
                     attributes={"gen_ai.tool.name": step.name, "gen_ai.tool.call.id": step.call_id,
                                 "agentsite.step.seq": step.seq, "agentsite.iteration": step.iteration,
                                 "agentsite.approval.decision": decision[:200],
                                 "agentsite.approval.decided_by": meta.get("decided_by"),
                                 "agentsite.approval.timeout_s": meta.get("timeout_s"),
                                 "error.type": None if step.success else "approval_denied"})
