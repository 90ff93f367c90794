"""The turn both export suites run (the in-process receiver's and the real Phoenix's): two
tool calls in one answer (run in parallel), one of them approved by a person, and a first
model request that fails once with a retryable error (a fake at the model edge), on the
offline demo model; and the attributes its spans must carry."""

from __future__ import annotations

from agents.chat.services import conversation_create
from agents.runtime.providers.base import ProviderError
from agents.runtime.providers.demo import DemoProvider
from agents.turns.approvals import approval_decide
from agents.turns.services import turn_start
from tests.approvals import waiting_approval
from tests.members import member_of
from traces.models import Trace

GEN_AI_CHAT = ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model",
               "gen_ai.response.model", "gen_ai.response.id", "gen_ai.response.finish_reasons",
               "gen_ai.conversation.id", "gen_ai.agent.id", "gen_ai.agent.name",
               "gen_ai.agent.version", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
               "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_creation.input_tokens",
               "gen_ai.usage.reasoning.output_tokens", "gen_ai.request.stream",
               "gen_ai.response.time_to_first_chunk")
CONTENT = ("gen_ai.system_instructions", "gen_ai.input.messages", "gen_ai.output.messages",
           "gen_ai.tool.definitions", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


def export_to_loopback(settings) -> None:
    """The receivers of these tests listen on loopback, which a team's endpoint may reach only
    when the operator allows it; spans go out in batches of 50 ms."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.OTEL_EXPORT_DELAY_MS = 50


def fail_first_request(monkeypatch) -> dict[str, int]:
    """The model edge answers the first request with a retryable 503 (a fake: the server's
    side of a model request), then as the demo model does."""
    calls = {"n": 0}
    real = DemoProvider.stream

    async def stream(self, request):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ProviderError("The model server is overloaded (503).", retryable=True, status=503)
        async for event in real(self, request):
            yield event

    monkeypatch.setattr(DemoProvider, "stream", stream)
    return calls


def run_approved_turn(make_agent, alice, run_in_thread) -> Trace:
    agent = make_agent(name="Careful", approval=("calculator",), system_prompt="Be brief. " * 40)
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation),
                       text="What is 6 * 7 and what time is it in UTC?")
    worker = run_in_thread(trace.pk)
    step = waiting_approval(trace, what="the calculator waiting for approval")
    approval_decide(trace=trace, call_id=step.call_id, approved=True, membership=member_of(alice, trace))
    worker.join(timeout=20)
    trace.refresh_from_db()
    assert trace.status == "completed", trace.error
    return trace


