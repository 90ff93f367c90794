"""The reliable wrapper's failover: a broken stream starts over, a deterministic server error
is not retried, an unreachable endpoint is skipped for the turn and cools down across turns,
and the final error is one sentence with the attempt log beside it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from agents.runtime.messages import Message
from agents.runtime.providers.base import (
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Provider,
    ProviderError,
    StreamDone,
    StreamEvent,
    StreamRestart,
    StreamText,
)
from agents.runtime.providers.reliable import CoolDowns, ReliableProvider

from .test_reliable import FakeProvider, FakeSleep, RetryLog, reliable, request, server_error


def cut_off() -> ProviderError:
    """What the wire raises for a stream that broke off mid-answer."""
    return ProviderError("The connection to the provider broke off.", retryable=True,
                         kind=ErrorKind.NETWORK)


def refused() -> ProviderError:
    return ProviderError("Could not connect to the provider at http://127.0.0.1:9.",
                         retryable=True, kind=ErrorKind.NETWORK)


def rate_limited() -> ProviderError:
    return ProviderError("The provider is rate limiting requests (429).", retryable=True,
                         kind=ErrorKind.RATE_LIMIT, status=429)


class FakeCutStream(FakeProvider):
    """Each stream plays the next script item: text answers in full, or ``(text, error)``
    streams ``text`` word by word and then fails with ``error``."""

    def __init__(self, name: str, *script: str | tuple[str, Exception]) -> None:
        super().__init__(name)
        self.streams = list(script)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.calls.append(request.model)
        item = self.streams[min(len(self.calls), len(self.streams)) - 1]
        text, error = item if isinstance(item, tuple) else (item, None)
        for piece in re.findall(r"\S+\s*", text):
            yield StreamText(piece)
        if error is not None:
            raise error
        yield StreamDone(ChatResponse(message=Message.assistant(text)))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def answer_after_last_restart(events: list[StreamEvent]) -> str:
    last = max((i for i, e in enumerate(events) if isinstance(e, StreamRestart)), default=-1)
    return "".join(e.text for e in events[last + 1:] if isinstance(e, StreamText))


# -- a stream that breaks off ------------------------------------------------------------------------
async def test_a_stream_cut_mid_answer_restarts_on_the_same_provider():
    primary = FakeCutStream("primary", ("Half an ", cut_off()), "The whole answer.")
    wrapper, sleep, log = reliable(primary)

    events = [e async for e in wrapper.stream(request())]

    (restart,) = [e for e in events if isinstance(e, StreamRestart)]
    assert restart.partial_text == "Half an "
    assert (restart.provider, restart.model, restart.next_provider, restart.next_model) == (
        "primary", "m1", "primary", "m1")
    assert restart.reason == ("The answer from “primary” broke off (connection failed) "
                              "and starts over.")
    assert answer_after_last_restart(events) == "The whole answer."
    assert events[-1].response.text == "The whole answer."
    assert primary.calls == ["m1", "m1"] and sleep.waits == [0.5]
    assert log.events == []  # the restart is the report; no retry step besides it


async def test_a_stream_that_keeps_breaking_off_restarts_on_the_fallback():
    primary = FakeCutStream("primary", ("One ", cut_off()), ("One two ", cut_off()),
                            ("One two three ", cut_off()))
    fallback = FakeCutStream("fallback", "From the fallback.")
    wrapper, sleep, _ = reliable(primary, (fallback, "fb-model"))

    events = [e async for e in wrapper.stream(request())]

    restarts = [e for e in events if isinstance(e, StreamRestart)]
    assert [r.partial_text for r in restarts] == ["One ", "One two ", "One two three "]
    assert [(r.next_provider, r.next_model) for r in restarts] == [
        ("primary", "m1"), ("primary", "m1"), ("fallback", "fb-model")]
    assert restarts[-1].reason == ("The answer from “primary” broke off (connection failed) "
                                   "and starts over on “fallback” with “fb-model”.")
    assert answer_after_last_restart(events) == "From the fallback."
    assert (events[-1].response.provider, events[-1].response.model) == ("fallback", "fb-model")
    assert sleep.waits == [0.5, 1.0]


async def test_a_stream_that_breaks_off_with_nothing_left_to_try_keeps_the_text_so_far():
    primary = FakeCutStream("primary", ("Only this ", cut_off()))
    wrapper, _, _ = reliable(primary, max_retries=0)

    with pytest.raises(ProviderError) as caught:
        [e async for e in wrapper.stream(request())]

    assert caught.value.partial_text == "Only this "
    assert caught.value.message.startswith("The model provider “primary” could not be reached")


# -- a server error that repeats itself -------------------------------------------------------------
async def test_a_500_that_repeats_with_the_same_body_is_not_retried_a_third_time():
    same = server_error(said=" Provider said: 'content' must not be null")
    primary, fallback = FakeProvider("primary", same), FakeProvider("fallback", "saved")
    wrapper, sleep, log = reliable(primary, fallback)

    response = await wrapper.chat(request())

    assert response.text == "saved" and response.provider == "fallback"
    assert primary.calls == ["m1", "m1"]
    assert sleep.waits == [0.5]
    assert [e.failover for e in log.events] == [False, True]


async def test_a_500_whose_body_changes_is_retried_in_full():
    primary = FakeProvider("primary", server_error(said=" a"), server_error(said=" b"), "ok")
    wrapper, sleep, _ = reliable(primary)

    assert (await wrapper.chat(request())).text == "ok"
    assert primary.calls == ["m1"] * 3 and sleep.waits == [0.5, 1.0]


# -- an endpoint that cannot be reached --------------------------------------------------------------
async def test_an_unreachable_primary_is_skipped_by_the_turns_next_request():
    primary, fallback = FakeProvider("primary", refused()), FakeProvider("fallback", "fine")
    wrapper, sleep, log = reliable(primary, fallback, cool_downs=CoolDowns(clock=FakeClock()))

    first = await wrapper.chat(request())
    second = await wrapper.chat(request())
    streamed = [e async for e in wrapper.stream(request())]

    assert first.provider == second.provider == streamed[-1].response.provider == "fallback"
    assert len(primary.calls) == 3  # its retries on the first request only
    assert fallback.calls == ["m1"] * 3
    assert sleep.waits == [0.5, 1.0]
    skips = [e for e in log.events if e.skipped]
    assert len(skips) == 2
    assert skips[0].error == ("Skipped: it could not be reached earlier in this turn "
                              "(connection failed).")
    assert (skips[0].provider, skips[0].next_provider, skips[0].failover) == (
        "primary", "fallback", True)


async def test_an_unreachable_endpoint_cools_down_across_turns_and_comes_back():
    clock = FakeClock()
    cool_downs = CoolDowns(seconds=30, clock=clock)

    async def turn(primary: FakeProvider) -> tuple[ChatResponse, FakeProvider]:
        # Every turn builds its own providers and wrapper, as the worker does.
        fallback = FakeProvider("fallback", "from the fallback")
        wrapper = ReliableProvider([primary, fallback], sleep=FakeSleep(), cool_downs=cool_downs)
        return await wrapper.chat(request()), fallback

    down = FakeProvider("primary", refused())
    response, _ = await turn(down)
    assert response.provider == "fallback" and len(down.calls) == 3

    clock.now += 29
    back = FakeProvider("primary", "primary is back")
    response, fallback = await turn(back)
    assert response.provider == "fallback"
    assert back.calls == [] and fallback.calls == ["m1"]

    clock.now += 2  # the cool-down is over: the primary is asked again
    response, fallback = await turn(back)
    assert response.text == "primary is back"
    assert back.calls == ["m1"] and fallback.calls == []


async def test_when_every_target_cools_down_each_is_tried_anyway_with_its_retries():
    cool_downs = CoolDowns(clock=FakeClock())
    down = FakeProvider("only", refused())
    with pytest.raises(ProviderError):
        await ReliableProvider([down], sleep=FakeSleep(), cool_downs=cool_downs).chat(request())
    assert len(down.calls) == 3

    back = FakeProvider("only", "I am back")
    sleep, log = FakeSleep(), RetryLog()
    wrapper = ReliableProvider([back], sleep=sleep, on_retry=log, cool_downs=cool_downs)

    assert (await wrapper.chat(request())).text == "I am back"
    assert back.calls == ["m1"] and log.events == []
    assert cool_downs.cooling("fake||only") is None  # it answered: no longer cooling down


async def test_another_turns_failures_do_not_take_this_turns_retries():
    # One turn gives up on the only provider (it cools down); the next turn meets a one-time
    # server error there and a cut stream: it retries them as it would have anyway.
    cool_downs = CoolDowns(clock=FakeClock())
    down = FakeProvider("only", refused())
    with pytest.raises(ProviderError):
        await ReliableProvider([down], sleep=FakeSleep(), cool_downs=cool_downs).chat(request())
    assert cool_downs.cooling("fake||only") is not None

    flaky = FakeProvider("only", server_error(said=" once"), "answered after a retry")
    sleep = FakeSleep()
    wrapper = ReliableProvider([flaky], sleep=sleep, cool_downs=cool_downs)
    assert (await wrapper.chat(request())).text == "answered after a retry"
    assert flaky.calls == ["m1", "m1"] and sleep.waits == [0.5]


# -- the final error ---------------------------------------------------------------------------------
async def test_the_final_error_is_one_sentence_and_the_attempts_are_in_its_details():
    primary = FakeProvider("Local llama", refused())
    fallback = FakeProvider("OpenRouter", rate_limited())
    wrapper, _, _ = reliable(primary, (fallback, "gpt-4o-mini"))

    with pytest.raises(ProviderError) as caught:
        await wrapper.chat(request())

    error = caught.value
    assert error.message == (
        "The model provider “Local llama” could not be reached; the fallback “OpenRouter” with "
        "“gpt-4o-mini” also failed (rate limited). Try again in a minute or check the providers "
        "in the admin.")
    assert "\n" not in error.message and "provider=" not in error.message
    lines = error.details.splitlines()
    assert len(lines) == 6
    assert lines[0].startswith("provider=Local llama model=m1 attempt 1/3: retryable; "
                               "error=Could not connect")
    assert lines[-1].startswith("provider=OpenRouter model=gpt-4o-mini attempt 3/3: rate_limited")
    assert error.kind == ErrorKind.RATE_LIMIT and error.retryable


async def test_a_rejected_key_everywhere_says_to_check_the_keys():
    rejected = ProviderError("The API key was rejected (401).", retryable=False,
                             kind=ErrorKind.AUTH, status=401)
    wrapper, _, _ = reliable(FakeProvider("a", rejected), FakeProvider("b", rejected),
                             FakeProvider("c", rejected))

    with pytest.raises(ProviderError) as caught:
        await wrapper.chat(request())

    assert caught.value.message == (
        "The model provider “a” rejected its API key (401); the fallbacks “b” (API key rejected) "
        "and “c” (API key rejected) also failed. Check the API keys of the providers in the "
        "admin.")


# -- streaming switched off in the configuration --------------------------------------------------
class FakeCountingStreams(FakeProvider):
    """Counts which of its two entry points each request took."""

    def __init__(self, name: str, *script: Exception | str, capabilities=None) -> None:
        super().__init__(name, *script)
        if capabilities is not None:
            Provider.__init__(self, name=name, capabilities=capabilities)
        self.streamed = 0

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.streamed += 1
        async for event in super().stream(request):
            yield event


@pytest.mark.parametrize("switch", [
    {"streaming": False},
    {"models": {"FALLBACK-MODEL": {"streaming": False}}},
], ids=["provider-wide", "per-model"])
async def test_a_fallback_whose_streaming_is_off_gets_a_whole_request(switch):
    primary = FakeCountingStreams("primary", server_error())
    fallback = FakeCountingStreams("fallback", "Whole answer.", capabilities=switch)
    wrapper, _sleep, _log = reliable(primary, (fallback, "fallback-model"), max_retries=0)

    events = [event async for event in wrapper.stream(request())]

    assert primary.streamed == 1
    assert fallback.streamed == 0 and fallback.calls == ["fallback-model"]
    assert answer_after_last_restart(events) == "Whole answer."
    assert isinstance(events[-1], StreamDone)


async def test_streaming_on_for_the_model_wins_over_off_for_the_provider():
    provider = FakeCountingStreams("only", "Streamed.", capabilities={
        "streaming": False, "models": {"m1": {"streaming": True}}})
    wrapper, _sleep, _log = reliable(provider)

    events = [event async for event in wrapper.stream(request("m1"))]

    assert provider.streamed == 1
    assert answer_after_last_restart(events) == "Streamed."


async def test_a_failover_says_which_parameters_the_next_provider_does_not_take():
    primary = FakeProvider("primary", refused())
    primary.request_params = frozenset({"max_tokens", "temperature", "seed", "top_p"})
    fallback = FakeProvider("fallback", "saved")  # takes max_tokens and temperature only
    wrapper, _, log = reliable(primary, fallback)
    asked = ChatRequest(model="m1", messages=[Message.user("hi")], temperature=0.2, seed=7, top_p=0.9)

    assert (await wrapper.chat(asked)).text == "saved"

    [failover] = [e for e in log.events if e.failover]
    assert failover.error.endswith("; “fallback” does not take top_p, seed: sent without them")
