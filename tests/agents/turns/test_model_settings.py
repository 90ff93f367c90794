"""Settings per provider and per model reach the turn: capabilities (a model's row over the
provider's over the kind's), streaming off, the longest answer. Turns run with the offline demo
model."""

from __future__ import annotations

import pytest

from agents.models import Provider, ProviderModel
from agents.runtime.providers.demo import DemoProvider
from agents.turns.builder import turn_setup_build
from agents.turns.providers import runtime_provider
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.helpers import drain, listen
from tests.members import member_of
from traces.models import Step, Trace


def test_a_model_row_overrides_the_provider_which_overrides_the_kind(team_a):
    provider = Provider.objects.create(team=team_a, name="Local", kind="openai",
                                       capabilities={"native_tool_calling": False, "vision": True,
                                                     "context_window": "kept, not a capability"})
    ProviderModel.objects.create(provider=provider, model="Qwen3-8B", native_tool_calling=True,
                                 streaming=False)
    ProviderModel.objects.create(provider=provider, model="tiny", context_window=2048)

    runtime = runtime_provider(Provider.objects.get(pk=provider.pk))

    own = runtime.capabilities_for("qwen3-8b")  # names compare without case
    assert (own.native_tool_calling, own.vision, own.streaming) == (True, True, False)
    other = runtime.capabilities_for("tiny")  # a row without capability overrides
    assert (other.native_tool_calling, other.vision, other.streaming) == (False, True, True)
    unknown = runtime.capabilities_for("llama3")
    assert (unknown.native_tool_calling, unknown.vision, unknown.streaming) == (False, True, True)


def test_settings_for_layers_the_row_over_the_provider(team_a):
    provider = Provider.objects.create(team=team_a, name="Local", kind="openai",
                                       context_window=32_000, max_output_tokens=1000,
                                       capabilities={"streaming": False})
    ProviderModel.objects.create(provider=provider, model="big", context_window=128_000,
                                 streaming=True)
    big, other = provider.settings_for("BIG"), provider.settings_for("other")
    assert (big.context_window, big.max_output_tokens, big.capabilities) == (128_000, 1000, {"streaming": True})
    assert (other.context_window, other.max_output_tokens, other.capabilities) == (32_000, 1000, {"streaming": False})


def test_setup_takes_streaming_and_the_longest_answer_from_the_settings(agent, conversation, alice, sent_turns):
    provider = agent.provider
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    setup = turn_setup_build(trace=Trace.objects.get(pk=trace.pk))
    assert setup.config.stream is True and setup.config.max_tokens is None

    provider.capabilities = {"streaming": False}
    provider.max_output_tokens = 300
    provider.save()
    setup = turn_setup_build(trace=Trace.objects.get(pk=trace.pk))
    assert setup.config.stream is False and setup.config.max_tokens == 300

    # the model's own row wins over the provider; the agent's own limit wins over both
    ProviderModel.objects.create(provider=provider, model="demo", streaming=True, max_output_tokens=200)
    setup = turn_setup_build(trace=Trace.objects.get(pk=trace.pk))
    assert setup.config.stream is True and setup.config.max_tokens == 200
    agent.max_output_tokens = 50
    agent.save()
    setup = turn_setup_build(trace=Trace.objects.get(pk=trace.pk))
    assert setup.config.max_tokens == 50


turns = pytest.mark.django_db(transaction=True)


class RecordingDemoProvider(DemoProvider):
    """The real offline model, noting which of its entry points a turn used."""

    used: list[str] = []  # noqa: RUF012 - shared by the instances a turn builds, on purpose

    async def chat(self, request):
        self.used.append("chat")
        return await super().chat(request)

    async def stream(self, request):
        self.used.append("stream")
        async for event in super().stream(request):
            yield event


@turns
@pytest.mark.parametrize(("provider_caps", "row_streaming", "streams"), [
    ({}, None, True),
    ({"streaming": False}, None, False),
    ({}, False, False),
    ({"streaming": False}, True, True),
])
def test_streaming_off_sends_one_request_per_answer_and_no_deltas(
        monkeypatch, agent, conversation, alice, sent_turns, use_redis, provider_caps, row_streaming,
        streams):
    from agents.runtime.providers import registry

    monkeypatch.setitem(registry.PROVIDER_CLASSES, "demo", RecordingDemoProvider)
    monkeypatch.setattr(RecordingDemoProvider, "used", [])
    provider = agent.provider
    provider.capabilities = provider_caps
    provider.save()
    if row_streaming is not None:
        ProviderModel.objects.create(provider=provider, model="demo", streaming=row_streaming)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")
    channel = listen(trace.group_name)

    assert turn_run(trace.pk) == "completed"

    events = drain(channel)
    deltas = [e for e in events if e["event"] == "delta"]
    steps = list(Step.objects.filter(trace_id=trace.pk, kind="llm_request").order_by("seq"))
    assert steps and all(s.output_tokens > 0 for s in steps)
    if streams:
        assert set(RecordingDemoProvider.used) == {"stream"} and deltas
        assert any(s.meta["first_token_ms"] is not None for s in steps)
    else:
        assert RecordingDemoProvider.used == ["chat"] * len(steps) and not deltas
        assert all(s.meta["first_token_ms"] is None for s in steps)
    assert "42" in Trace.objects.get(pk=trace.pk).answer
