"""Turns exported as OpenTelemetry GenAI spans, received by a real OTLP/HTTP server in this
process (``tests.otel.receiver``: the protobuf decoded with ``opentelemetry-proto``).

A turn runs in this process with the offline demo model: two tool calls in one answer (run in
parallel), one of them approved by a person, and a first model request that fails once with
a retryable error (a fake at the model edge). Its spans must be named, nested, timed and
attributed by the GenAI conventions, with tokens equal to the trace's, and carry content only
as the exporter's policy says."""

from __future__ import annotations

import json
import time

import pytest

from agents.chat.services import conversation_create
from agents.turns.approvals import approval_decide
from agents.turns.services import turn_cancel, turn_start
from agents.turns.tasks import turn_run
from tests.approvals import waiting_approval
from tests.helpers import wait_for
from tests.members import member_of
from tests.otel.receiver import OTLPReceiver, ReceivedSpan
from tests.otel.scenario import (
    CONTENT,
    GEN_AI_CHAT,
    export_to_loopback,
    fail_first_request,
    run_approved_turn,
)
from traces.export import config as export_config
from traces.export import pipeline, probe
from traces.export.ids import format_traceparent, span_id_for
from traces.export.spans import ns
from traces.models import Step, Trace, TraceExporter

pytestmark = pytest.mark.django_db(transaction=True)

@pytest.fixture(autouse=True)
def _loopback(settings):
    export_to_loopback(settings)  # the receiver is on loopback


@pytest.fixture
def exporter(team_a, receiver):
    def make(**fields) -> TraceExporter:
        row, _ = TraceExporter.objects.update_or_create(
            team=team_a, defaults={"endpoint": receiver.endpoint, **fields})
        export_config.forget()
        pipeline.forget_configured()
        return row
    return make


@pytest.fixture
def failing_once(monkeypatch):
    return fail_first_request(monkeypatch)


def by_name(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    named: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def turn_spans(receiver: OTLPReceiver, trace: Trace, count: int) -> list[ReceivedSpan]:
    pipeline.PIPELINE.flush(10.0)
    ours = lambda spans: [s for s in spans if s.attributes.get("gen_ai.conversation.id")  # noqa: E731
                          == trace.conversation.uuid.hex]
    return ours(receiver.wait_for(lambda spans: len(ours(spans)) >= count, timeout_s=15))


# -- the whole turn -----------------------------------------------------------------------------------
def test_a_multi_step_turn_becomes_nested_genai_spans_with_the_traces_numbers(
        exporter, receiver, make_agent, alice, sent_turns, use_redis, run_in_thread, failing_once):
    exporter()
    trace = run_approved_turn(make_agent, alice, run_in_thread)
    steps = {s.seq: s for s in trace.steps.select_related("price")}
    models_ = [s for s in steps.values() if s.kind == "llm_request"]
    tools = [s for s in steps.values() if s.kind == "tool_call"]
    assert len(models_) == 2 and len(tools) == 2 and failing_once["n"] >= 3

    spans = turn_spans(receiver, trace, count=6)
    named = by_name(spans)
    root = named["invoke_agent Careful"][0]
    assert sorted(named) == ["await_approval calculator", "chat demo", "execute_tool calculator",
                             "execute_tool current_time", "invoke_agent Careful"]
    assert len(named["chat demo"]) == 2 and len(spans) == 6
    # one trace, the turn's uuid; everything under the turn's span, which has no parent
    assert {s.trace_id for s in spans} == {trace.uuid.hex}
    assert root.parent_span_id is None and root.span_id == f"{span_id_for(trace.uuid, 'turn'):016x}"
    assert all(s.parent_span_id == root.span_id for s in spans if s is not root)
    assert {s.name: s.kind for s in spans}["chat demo"] == "CLIENT"
    assert {s.kind for s in spans if not s.name.startswith("chat")} == {"INTERNAL"}
    assert root.resource["service.name"] == "agentsite"

    # the turn: its numbers are the trace's
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.usage.input_tokens"] == trace.prompt_tokens
    assert root.attributes["gen_ai.usage.output_tokens"] == trace.output_tokens
    assert root.attributes["agentsite.cost_usd"] == float(trace.cost_usd)
    assert root.attributes["agentsite.trace.url"].endswith(f"/traces/{trace.uuid}/")
    assert root.attributes["agentsite.trace.status"] == "completed"
    assert (root.start_ns, root.end_ns) == (ns(trace.started_at), ns(trace.finished_at))
    states = [e for e in root.events if e.name == "agentsite.trajectory_state"]
    assert [e.attributes["agentsite.iteration"] for e in states] == [1]

    # each model request: every attribute of the conventions, its tokens, its real times
    chats = sorted(named["chat demo"], key=lambda s: s.start_ns)
    for span, step in zip(chats, sorted(models_, key=lambda s: s.seq), strict=True):
        missing = [a for a in GEN_AI_CHAT if a not in span.attributes]
        assert not missing, missing
        a = span.attributes
        assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"]) == ("chat", "agentsite.demo")
        assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "demo"
        assert a["gen_ai.response.id"].startswith("demo-")
        assert a["gen_ai.conversation.id"] == trace.conversation.uuid.hex
        assert a["gen_ai.agent.name"] == "Careful" and a["gen_ai.agent.version"] == str(trace.agent_version)
        assert a["gen_ai.usage.input_tokens"] == step.prompt_tokens > 0
        assert a["gen_ai.usage.output_tokens"] == step.output_tokens > 0
        assert a["gen_ai.request.stream"] is True and a["gen_ai.response.time_to_first_chunk"] >= 0
        assert a["agentsite.step.seq"] == step.seq and a["agentsite.price.match"] == "exact"
        assert span.start_ns == ns(step.started_at)
        assert abs(span.end_ns - span.start_ns - step.duration_ms * 1e6) < 1e3
        assert not set(CONTENT) & set(a)  # content is off by default
    assert chats[0].attributes["gen_ai.response.finish_reasons"] == ["tool_use"]
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in chats) == trace.prompt_tokens
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in chats) == trace.output_tokens
    # the retry inside the first request is its event
    retry = [e for e in chats[0].events if e.name == "agentsite.retry"]
    assert retry and "503" in retry[0].attributes["exception.message"]

    # the tools and the person's decision
    calls = {s.name: s for s in spans if s.name.startswith("execute_tool")}
    for step in tools:
        span = calls[f"execute_tool {step.name}"]
        assert span.attributes["gen_ai.tool.call.id"] == step.call_id
        assert span.attributes["gen_ai.tool.name"] == step.name
        assert span.attributes["gen_ai.tool.type"] == "function"
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
    approval = named["await_approval calculator"][0]
    assert approval.attributes["agentsite.approval.decision"] == "approved"
    assert approval.attributes["agentsite.approval.decided_by"] == "alice"
    assert approval.attributes["gen_ai.tool.call.id"] == calls["execute_tool calculator"].attributes[
        "gen_ai.tool.call.id"]


def test_each_step_leaves_as_it_ends_not_with_the_turn(
        exporter, receiver, make_agent, alice, sent_turns, use_redis, run_in_thread):
    """Live: the model request and the tool call that run before the approval are received
    while the turn still waits for a person."""
    exporter()
    agent = make_agent(name="Careful", approval=("calculator",))
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")
    worker = run_in_thread(trace.pk)
    step = waiting_approval(trace, what="the calculator waiting for approval")
    early = receiver.wait_for(lambda spans: any(s.name == "chat demo" for s in spans), timeout_s=10)
    assert Trace.objects.get(pk=trace.pk).status == "running"
    assert not any(s.name.startswith("invoke_agent") for s in early)
    approval_decide(trace=trace, call_id=step.call_id, approved=True, membership=member_of(alice, trace))
    worker.join(timeout=20)
    assert any(s.name.startswith("invoke_agent") for s in turn_spans(receiver, trace, count=5))


def test_a_stopped_turn_ends_its_open_request_and_says_why(
        exporter, receiver, make_agent, alice, sent_turns, use_redis, run_in_thread):
    exporter()
    agent = make_agent(name="Slow", provider_options={"first_token_latency_s": 0.05, "token_delay_s": 0.1})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Tell me a story")
    worker = run_in_thread(trace.pk)
    wait_for(lambda: Step.objects.filter(trace=trace, kind="llm_request", status="running").exists(),
             what="the story streaming")
    time.sleep(0.3)
    turn_cancel(trace=trace, membership=member_of(alice, trace))
    worker.join(timeout=10)
    trace.refresh_from_db()
    assert trace.status == "cancelled"
    spans = turn_spans(receiver, trace, count=2)
    root = next(s for s in spans if s.name == "invoke_agent Slow")
    chat = next(s for s in spans if s.name == "chat demo")
    assert root.attributes["agentsite.trace.status"] == "cancelled"
    assert root.status_code == "UNSET"  # a person's stop is not a failure of the turn
    assert root.attributes["error.type"] == "cancelled"  # but the turn did not complete
    assert chat.status_code == "ERROR" and chat.status_message == "cancelled"
    assert chat.end_ns <= root.end_ns and chat.attributes["gen_ai.usage.output_tokens"] > 0


# -- content -------------------------------------------------------------------------------------------
def test_full_content_is_structured_json_by_the_conventions(
        exporter, receiver, agent, conversation, alice, sent_turns, use_redis):
    exporter(content="full")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")
    assert turn_run(trace.pk) == "completed"
    spans = turn_spans(receiver, trace, count=4)
    chats = sorted((s for s in spans if s.name == "chat demo"), key=lambda s: s.start_ns)
    first, second = (s.attributes for s in chats)
    [question] = json.loads(first["gen_ai.input.messages"])  # as sent: with its time stamp
    assert question["role"] == "user" and question["parts"][0]["type"] == "text"
    assert question["parts"][0]["content"].endswith(" UTC] What is 6 * 7?")
    definitions = json.loads(first["gen_ai.tool.definitions"])
    assert {d["name"] for d in definitions} == {"calculator", "current_time"}
    assert all(d["type"] == "function" and "parameters" in d for d in definitions)
    output = json.loads(first["gen_ai.output.messages"])
    assert output[0]["role"] == "assistant" and output[0]["finish_reason"] == "tool_call"
    call = next(p for p in output[0]["parts"] if p["type"] == "tool_call")
    assert call["name"] == "calculator" and call["arguments"] == {"expression": "6*7"}
    # the second request sent the whole conversation: the question, the call, its result
    roles = [m["role"] for m in json.loads(second["gen_ai.input.messages"])]
    assert roles[0] == "user" and roles[1] == "assistant" and len(roles) == 3
    result = json.loads(second["gen_ai.input.messages"])[2]["parts"][0]
    assert result["type"] == "tool_call_response" and result["id"] == call["id"]
    assert "42" in result["response"]
    trace.refresh_from_db()
    assert json.loads(second["gen_ai.output.messages"])[0]["parts"][0]["content"] == trace.answer
    tool = next(s for s in spans if s.name == "execute_tool calculator").attributes
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"expression": "6*7"}
    assert "42" in tool["gen_ai.tool.call.result"]


def test_redacted_content_is_scrubbed_and_cut_per_field(
        exporter, receiver, make_agent, alice, sent_turns, use_redis):
    exporter(content="redacted", max_field_chars=40)
    agent = make_agent(name="Wordy", system_prompt="Use the key sk-proj-" + "A1b2C3d4" * 6 + " " + "x" * 300)
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello there " * 20)
    assert turn_run(trace.pk) == "completed"
    chat = next(s for s in turn_spans(receiver, trace, count=2) if s.name == "chat demo").attributes
    system = json.loads(chat["gen_ai.system_instructions"])[0]["content"]
    assert "A1b2C3d4" not in system and "more characters redacted" in system
    assert len(system.split("…")[0]) == 40
    question = json.loads(chat["gen_ai.input.messages"])[0]["parts"][0]["content"]
    assert "] hello there" in question and "more characters redacted" in question


# -- trace context ---------------------------------------------------------------------------------------
def test_a_callers_traceparent_is_the_parent_of_the_turn(
        exporter, receiver, agent, conversation, alice, sent_turns, use_redis):
    exporter()
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    caller = format_traceparent(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7)
    Trace.objects.filter(pk=trace.pk).update(meta={"traceparent": caller})
    assert turn_run(trace.pk) == "completed"
    spans = turn_spans(receiver, trace, count=2)
    root = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert {s.trace_id for s in spans} == {"4bf92f3577b34da6a3ce929d0e0e4736"}
    assert root.parent_span_id == "00f067aa0ba902b7"


# -- the switches ----------------------------------------------------------------------------------------
def test_a_team_with_export_off_sends_nothing_and_other_teams_nothing_of_it(
        exporter, receiver, agent, conversation, alice, sent_turns, use_redis, team_b, make_agent,
        charlie):
    exporter(enabled=False)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")
    assert turn_run(trace.pk) == "completed"
    # team B's exporter points at the same receiver; team A's turn must not reach it
    TraceExporter.objects.create(team=team_b, endpoint=receiver.endpoint)
    export_config.forget()
    pipeline.forget_configured()
    rival = make_agent(name="Rival", team=team_b)
    theirs = conversation_create(agent=rival, membership=member_of(charlie, team_b))
    other = turn_start(conversation=theirs, membership=member_of(charlie, theirs), text="hello")
    assert turn_run(other.pk) == "completed"
    spans = turn_spans(receiver, other, count=2)
    assert {s.trace_id for s in receiver.spans} == {other.uuid.hex}
    assert {s.resource["agentsite.team.id"] for s in spans} == {team_b.uuid.hex}


def test_the_sites_default_exporter_serves_teams_without_their_own(
        settings, receiver, agent, conversation, alice, sent_turns, use_redis):
    settings.OTEL_EXPORT_ENDPOINT = receiver.endpoint.removesuffix("/v1/traces")
    settings.OTEL_EXPORT_HEADERS = "x-api-key=s%3Dcret,x-other=1"
    settings.OTEL_SERVICE_NAME = "agents-prod"
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    assert turn_run(trace.pk) == "completed"
    spans = turn_spans(receiver, trace, count=2)
    assert spans[0].headers["x-api-key"] == "s=cret" and spans[0].headers["x-other"] == "1"
    assert {s.resource["service.name"] for s in spans} == {"agents-prod"}


def test_a_teams_endpoint_goes_through_the_outbound_policy(
        settings, exporter, receiver, agent, conversation, alice, sent_turns, use_redis):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    exporter()
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    assert turn_run(trace.pk) == "completed"
    pipeline.PIPELINE.flush(5.0)
    assert receiver.requests == 0  # loopback is refused before connecting
    result = probe.send_test_span(export_config.config_for(trace.team_id))
    assert not result.ok and "loopback" in result.answer


# -- a receiver that fails ----------------------------------------------------------------------------
def test_a_receiver_that_answers_503_gets_the_spans_on_a_retry(
        exporter, receiver, agent, conversation, alice, sent_turns, use_redis):
    exporter()
    receiver.fail_with(503, times=1, retry_after="0")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    assert turn_run(trace.pk) == "completed"
    spans = turn_spans(receiver, trace, count=2)
    assert {s.name for s in spans} == {"chat demo", "invoke_agent Helper"}
    assert receiver.requests >= 2


def test_a_slow_or_dead_receiver_never_slows_a_turn(
        exporter, agent, conversation, alice, sent_turns, use_redis):
    """The receiver answers after 5 s (then is gone): the turn takes what it takes without
    export, far under one receiver delay. The bound is loose on purpose; ``make bench otel``
    measures the difference."""
    with OTLPReceiver(delay_s=5.0) as slow:
        TraceExporter.objects.create(team=agent.team, endpoint=slow.endpoint)
        export_config.forget()
        pipeline.forget_configured()
        took = []
        for text in ("What is 6 * 7?", "What is 2 + 2?", "hello"):
            trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text=text)
            started = time.perf_counter()
            assert turn_run(trace.pk) == "completed"
            took.append(time.perf_counter() - started)
        assert max(took) < 2.5, took


@pytest.mark.parametrize(("content", "says"), [("off", "The tool call failed."), ("full", "zero")])
def test_a_failed_tools_error_is_content_and_follows_the_policy(
        exporter, receiver, agent, conversation, alice, sent_turns, use_redis, content, says):
    exporter(content=content)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 1 / 0?")
    assert turn_run(trace.pk) == "completed"
    tool = next(s for s in turn_spans(receiver, trace, count=4) if s.name == "execute_tool calculator")
    assert tool.status_code == "ERROR" and tool.attributes["error.type"] == "tool_error"
    assert says in tool.status_message
