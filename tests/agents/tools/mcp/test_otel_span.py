"""An MCP tool call exported as an OpenTelemetry span: ``execute_tool`` with the ``mcp.*``
attributes, from a turn that asks the real reference time server (``mcp-server-time``, over
stdio) and is received by the in-test OTLP/HTTP receiver."""

from __future__ import annotations

import pytest

from agents.chat.services import conversation_create
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.members import member_of
from tests.otel.receiver import OTLPReceiver
from traces.export import config as export_config
from traces.export import pipeline
from traces.export.spans import Turn, step_spans
from traces.models import Step, TraceExporter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_mcp_call_is_an_execute_tool_span_with_the_mcp_facts(
        settings, timekeeper, alice, team_a, sent_turns, use_redis) -> None:
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    agent = timekeeper
    conversation = conversation_create(agent=agent, membership=member_of(alice, team_a))
    with OTLPReceiver() as receiver:
        TraceExporter.objects.create(team=team_a, endpoint=receiver.endpoint)
        export_config.forget()
        pipeline.forget_configured()
        trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What time is it in Europe/Paris?")
        assert turn_run(trace.pk) == "completed"
        pipeline.PIPELINE.flush(10.0)
        spans = receiver.wait_for(lambda found: any(s.name.startswith("invoke_agent") for s in found))

    tool = next(s for s in spans if s.name == "execute_tool clock_get_current_time")
    assert tool.attributes["gen_ai.tool.type"] == "extension"
    assert tool.attributes["mcp.method.name"] == "tools/call"
    assert tool.attributes["mcp.protocol.version"] == "2026-07-28"
    assert tool.attributes["agentsite.mcp.server"] == "clock"
    assert "mcp.session.id" not in tool.attributes  # stdio: the process is the session

    # over Streamable HTTP with sessions, the server's session id goes with it
    step = Step.objects.get(trace=trace, kind="tool_call")
    step.meta = {**step.meta, "mcp": {**step.meta["mcp"], "transport": "http",
                                      "session_id": "3f1c9a", "protocol_version": "2025-11-25"}}
    [span] = step_spans(Turn(trace, export_config.config_for(team_a.pk)), step, payloads={})
    assert span.attributes["mcp.session.id"] == "3f1c9a"
    assert span.attributes["mcp.protocol.version"] == "2025-11-25"
