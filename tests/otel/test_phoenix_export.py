"""A turn exported to a real Arize Phoenix and read back through Phoenix's own REST API.

``make test-otel`` installs Phoenix once per machine and starts it on free ports with an empty
store. The turn (``scenario``: two parallel tools, an approval, a retry) runs in this process
on the demo model with the team's exporter pointed at Phoenix, once per content policy; each
run files its spans under a project of its own (the exporter's service name)."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.otel import phoenix_client
from tests.otel.scenario import (
    CONTENT,
    GEN_AI_CHAT,
    export_to_loopback,
    fail_first_request,
    run_approved_turn,
)
from traces.export import pipeline
from traces.models import TraceExporter

pytestmark = pytest.mark.django_db(transaction=True)

TOOL_ATTRIBUTES = ("gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id",
                   "gen_ai.tool.type")


@pytest.fixture(autouse=True)
def _loopback(settings):
    export_to_loopback(settings)  # Phoenix is on loopback


@pytest.mark.parametrize("content", ["off", "redacted", "full"])
def test_phoenix_receives_the_turn_as_the_trace_recorded_it(
        phoenix_url, content, team_a, make_agent, alice, sent_turns, use_redis, run_in_thread,
        monkeypatch):
    project = f"agentsite-test-{content}-{uuid.uuid4().hex[:8]}"
    TraceExporter.objects.create(team=team_a, endpoint=phoenix_url, content=content,
                                 max_field_chars=24, service_name=project)
    fail_first_request(monkeypatch)
    trace = run_approved_turn(make_agent, alice, run_in_thread)
    assert pipeline.PIPELINE.flush(15.0)

    spans = phoenix_client.wait_for_spans(phoenix_url, project, trace.uuid.hex, count=6)
    names = sorted(s["name"] for s in spans)
    assert names == ["await_approval calculator", "chat demo", "chat demo",
                     "execute_tool calculator", "execute_tool current_time", "invoke_agent Careful"]
    root = next(s for s in spans if s["name"] == "invoke_agent Careful")
    assert root["parent_id"] is None and root["span_kind"] == "AGENT"
    assert all(s["parent_id"] == root["span_id"] for s in spans if s is not root)
    assert root["attributes"]["gen_ai.usage.input_tokens"] == trace.prompt_tokens
    assert root["attributes"]["gen_ai.usage.output_tokens"] == trace.output_tokens
    assert root["attributes"]["agentsite.trace.id"] == trace.uuid.hex
    # The root span is the trace's own start and end, as stored (no clock is read here).
    assert (root["start_time"], root["end_time"]) == (trace.started_at, trace.finished_at)

    steps = {s.seq: s for s in trace.steps.all()}
    chats = [s for s in spans if s["name"] == "chat demo"]
    assert {s["span_kind"] for s in chats} == {"LLM"}
    for span in chats:
        a = span["attributes"]
        missing = [name for name in GEN_AI_CHAT if name not in a]
        assert not missing, missing
        step = steps[a["agentsite.step.seq"]]
        assert a["gen_ai.usage.input_tokens"] == step.prompt_tokens
        assert a["gen_ai.usage.output_tokens"] == step.output_tokens
        assert a["gen_ai.usage.cache_read.input_tokens"] == step.cache_read_tokens
        assert span["start_time"] == step.started_at
    assert sum(s["attributes"]["gen_ai.usage.input_tokens"] for s in chats) == trace.prompt_tokens
    first = min(chats, key=lambda s: s["start_time"])
    assert [e["name"] for e in first["events"]] == ["agentsite.retry"]
    tools = [s for s in spans if s["name"].startswith("execute_tool")]
    assert {s["span_kind"] for s in tools} == {"TOOL"}
    for span in tools:
        assert all(name in span["attributes"] for name in TOOL_ATTRIBUTES)
        assert span["attributes"]["gen_ai.tool.call.id"] == steps[
            span["attributes"]["agentsite.step.seq"]].call_id

    sent = {name for s in spans for name in s["attributes"] if name in CONTENT}
    if content == "off":
        assert not sent
        return
    assert sent == set(CONTENT)
    answer = json.loads(max(chats, key=lambda s: s["start_time"])["attributes"]["gen_ai.output.messages"])
    text = answer[0]["parts"][0]["content"]
    system = json.loads(first["attributes"]["gen_ai.system_instructions"])[0]["content"]
    if content == "full":
        assert text == trace.answer and system == "Be brief. " * 40
    else:
        assert system.startswith("Be brief. " * 2) and "more characters redacted" in system
        assert len(system.split("…")[0]) == 24
