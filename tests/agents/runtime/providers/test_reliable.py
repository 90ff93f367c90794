from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agents.runtime.events import Retry
from agents.runtime.messages import Message
from agents.runtime.providers.base import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Provider,
    ProviderError,
    StreamDone,
    StreamEvent,
    StreamText,
)
from agents.runtime.providers.openai import OpenAIProvider
from agents.runtime.providers.reliable import ReliableProvider
from agents.runtime.providers.retry_rules import truncate_for_context

from .fakes import FakeLLMServer, json_response

KEY = "sk-live-0123456789abcdefghijklmnop"


def server_error(status: int = 500, said: str = "", **kwargs) -> ProviderError:
    return ProviderError(f"server error ({status}){said}", retryable=True,
                         kind=ErrorKind.SERVER, status=status, **kwargs)


def flaky(count: int = 3) -> list[ProviderError]:
    """Server errors that differ each time (a server under load), so every one is retried."""
    return [server_error(said=f" busy #{n}") for n in range(1, count + 1)]


def auth_error() -> ProviderError:
    return ProviderError("The API key was rejected (401).", retryable=False, kind=ErrorKind.AUTH,
                         status=401)


class FakeProvider(Provider):
    """Plays a script: each call takes the next outcome (an exception or reply text); the last
    outcome repeats. Records the model of every call."""

    kind = "fake"
    default_capabilities = Capabilities(native_tool_calling=True, streaming=True)

    def __init__(self, name: str, *script: Exception | str,
                 by_model: dict[str, list[Exception | str]] | None = None) -> None:
        super().__init__(name=name)
        self.script = list(script) or ["ok"]
        self.by_model = by_model or {}
        self.calls: list[str] = []

    def _next(self, model: str) -> Exception | str:
        self.calls.append(model)
        script = self.by_model.get(model, self.script)
        return script[min(self.calls.count(model) - 1, len(script) - 1)]

    async def chat(self, request: ChatRequest) -> ChatResponse:
        outcome = self._next(request.model)
        if isinstance(outcome, Exception):
            raise outcome
        return ChatResponse(message=Message.assistant(outcome))

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        outcome = self._next(request.model)
        if isinstance(outcome, Exception):
            raise outcome
        for word in outcome.split(" "):
            yield StreamText(word)
        yield StreamDone(ChatResponse(message=Message.assistant(outcome)))


class FakeSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class RetryLog:
    def __init__(self) -> None:
        self.events: list[Retry] = []

    async def __call__(self, event: Retry) -> None:
        self.events.append(event)


def request(model: str = "m1") -> ChatRequest:
    return ChatRequest(model=model, messages=[Message.user("hi")])


def reliable(*providers, **kwargs) -> tuple[ReliableProvider, FakeSleep, RetryLog]:
    sleep, log = FakeSleep(), RetryLog()
    return ReliableProvider(list(providers), sleep=sleep, on_retry=log, **kwargs), sleep, log


async def test_a_success_needs_one_call_and_names_the_provider_and_model():
    primary = FakeProvider("primary", "hello")
    wrapper, sleep, log = reliable(primary)

    response = await wrapper.chat(request())

    assert response.text == "hello"
    assert (response.provider, response.model) == ("primary", "m1")
    assert primary.calls == ["m1"] and sleep.waits == [] and log.events == []


async def test_500_then_success_retries_after_half_a_second():
    primary = FakeProvider("primary", server_error(), "recovered")
    wrapper, sleep, log = reliable(primary)

    response = await wrapper.chat(request())

    assert response.text == "recovered"
    assert sleep.waits == [0.5]
    (event,) = log.events
    assert (event.provider, event.model, event.attempt, event.backoff_ms) == (
        "primary", "m1", 1, 500.0)
    assert not event.failover


async def test_attempts_go_model_chain_then_providers_then_retries():
    primary = FakeProvider("primary", *flaky())
    fallback = FakeProvider("fallback", *flaky())
    wrapper, _, _ = reliable(primary, fallback, model_fallbacks={"m1": ["m2"]})

    with pytest.raises(ProviderError) as caught:
        await wrapper.chat(request())

    assert primary.calls == ["m1"] * 3 + ["m2"] * 3
    assert fallback.calls == ["m1"] * 3 + ["m2"] * 3
    lines = caught.value.details.splitlines()
    assert lines[0] == ("provider=primary model=m1 attempt 1/3: retryable; "
                        "error=server error (500) busy #1")
    assert [line.split(" attempt")[0] for line in lines] == (
        ["provider=primary model=m1"] * 3 + ["provider=fallback model=m1"] * 3
        + ["provider=primary model=m2"] * 3 + ["provider=fallback model=m2"] * 3)
    assert caught.value.retryable and caught.value.kind == ErrorKind.SERVER


async def test_backoff_doubles_from_500_ms_to_a_10_s_cap():
    wrapper, sleep, _ = reliable(FakeProvider("p", *flaky(8)), max_retries=7)

    with pytest.raises(ProviderError):
        await wrapper.chat(request())

    assert sleep.waits == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


@pytest.mark.parametrize(("retry_after", "expected_ms"), [(3.0, 3000), (60.0, 30_000),
                                                           (0.1, 500)])
async def test_retry_after_is_honoured_up_to_30_s_but_never_below_the_backoff(retry_after,
                                                                              expected_ms):
    limited = ProviderError("rate limited (429)", retryable=True, kind=ErrorKind.RATE_LIMIT,
                            status=429, retry_after=retry_after)
    wrapper, sleep, log = reliable(FakeProvider("p", limited, "ok"))

    await wrapper.chat(request())

    assert sleep.waits == [expected_ms / 1000]
    assert log.events[0].backoff_ms == expected_ms


async def test_failover_goes_to_the_fallback_model_then_the_fallback_provider():
    missing = ProviderError("The model 'm1' was not found (404).", retryable=False,
                            kind=ErrorKind.MODEL_NOT_FOUND, status=404)
    primary = FakeProvider("primary", by_model={"m1": [missing], "m2": flaky()})
    fallback = FakeProvider("fallback", by_model={"m1": [missing], "m2": ["from fallback"]})
    wrapper, sleep, log = reliable(primary, fallback, model_fallbacks={"m1": ["m2"]})

    response = await wrapper.chat(request())

    assert response.text == "from fallback"
    assert (response.provider, response.model) == ("fallback", "m2")
    assert primary.calls == ["m1", "m2", "m2", "m2"]
    assert fallback.calls == ["m1", "m2"]
    failovers = [(e.provider, e.model, e.next_provider, e.next_model)
                 for e in log.events if e.failover]
    assert failovers == [("primary", "m1", "fallback", "m1"), ("fallback", "m1", "primary", "m2"),
                         ("primary", "m2", "fallback", "m2")]
    assert sleep.waits == [0.5, 1.0]


@pytest.mark.parametrize("error", [
    auth_error(),
    ProviderError("bad request (400)", retryable=False, kind=ErrorKind.BAD_REQUEST, status=400),
    ProviderError("quota (429)", retryable=False, kind=ErrorKind.RATE_LIMIT, status=429),
])
async def test_permanent_errors_are_not_retried(error):
    primary, fallback = FakeProvider("primary", error), FakeProvider("fallback", "saved")
    wrapper, sleep, _ = reliable(primary, fallback)

    response = await wrapper.chat(request())

    assert primary.calls == ["m1"] and sleep.waits == []
    assert response.provider == "fallback"


async def test_context_overflow_is_raised_at_once_for_the_loop_to_compact():
    overflow = ProviderError("too long", retryable=False, kind=ErrorKind.CONTEXT_OVERFLOW,
                             status=400)
    primary, fallback = FakeProvider("primary", overflow), FakeProvider("fallback", "unused")
    wrapper, sleep, log = reliable(primary, fallback, model_fallbacks={"m1": ["m2"]})

    with pytest.raises(ProviderError) as caught:
        await wrapper.chat(request())

    assert caught.value.kind == ErrorKind.CONTEXT_OVERFLOW
    assert primary.calls == ["m1"] and fallback.calls == []
    assert sleep.waits == [] and log.events == []


async def test_foreign_exceptions_are_classified_by_their_text():
    primary = FakeProvider("primary", RuntimeError("API error (401 Unauthorized): invalid key"))
    overflowing = FakeProvider("other", RuntimeError("maximum context length exceeded"))

    wrapper, sleep, _ = reliable(primary)
    with pytest.raises(ProviderError) as caught:
        await wrapper.chat(request())
    assert primary.calls == ["m1"] and sleep.waits == []
    assert "non_retryable" in caught.value.details

    wrapper, _, _ = reliable(overflowing)
    with pytest.raises(ProviderError) as caught:
        await wrapper.chat(request())
    assert caught.value.kind == ErrorKind.CONTEXT_OVERFLOW


async def test_the_final_error_never_contains_a_key():
    leaky = FakeProvider("leaky", RuntimeError(f"503 upstream said: Authorization: Bearer {KEY}"))
    wrapper, _, log = reliable(leaky)

    with pytest.raises(ProviderError) as caught:
        await wrapper.chat(request())

    assert KEY not in caught.value.message and KEY not in caught.value.details
    assert all(KEY not in e.error for e in log.events)


async def test_a_real_openai_provider_401_fails_over_without_leaking_the_key():
    server = FakeLLMServer(json_response(401, {"error": {"message": f"Incorrect API key {KEY}"}}))
    primary = OpenAIProvider(api_key=KEY, http_client=server.client(), name="openai-main")
    wrapper, sleep, _ = reliable(primary, FakeProvider("backup", "fine"))

    response = await wrapper.chat(request("gpt-4o"))

    assert response.provider == "backup"
    assert len(server.requests) == 1 and sleep.waits == []


async def test_a_pinned_provider_uses_its_own_model_once():
    primary = FakeProvider("primary", server_error())
    pinned = FakeProvider("pinned", server_error())
    sleep = FakeSleep()
    wrapper = ReliableProvider([primary, (pinned, "p-model")], max_retries=0, sleep=sleep,
                               model_fallbacks={"m1": ["m2"]})

    with pytest.raises(ProviderError):
        await wrapper.chat(request())

    assert primary.calls == ["m1", "m2"]
    assert pinned.calls == ["p-model"]


# -- streaming ---------------------------------------------------------------------------------------
async def test_stream_retries_before_the_first_event():
    primary = FakeProvider("primary", server_error(), "streamed words")
    wrapper, sleep, _ = reliable(primary)

    events = [e async for e in wrapper.stream(request())]

    assert [e.text for e in events if isinstance(e, StreamText)] == ["streamed", "words"]
    assert events[-1].response.provider == "primary"
    assert sleep.waits == [0.5]


class FakeBrokenStream(FakeProvider):
    """Streams "partial", then fails with ``error`` (a server error by default)."""

    def __init__(self, name: str, *script: Exception | str, error: Exception | None = None,
                 **kwargs) -> None:
        super().__init__(name, *script, **kwargs)
        self.error = error

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.calls.append(request.model)
        yield StreamText("partial")
        raise self.error or server_error()


async def test_a_permanent_error_after_the_first_event_is_raised_with_the_text_so_far():
    refused = ProviderError("bad request (400)", retryable=False, kind=ErrorKind.BAD_REQUEST,
                            status=400)
    broken = FakeBrokenStream("broken", error=refused)
    wrapper, sleep, _ = reliable(broken, FakeProvider("fallback", "unused"))
    seen = []

    with pytest.raises(ProviderError) as caught:
        async for event in wrapper.stream(request()):
            seen.append(event)

    assert [e.text for e in seen] == ["partial"]
    assert broken.calls == ["m1"] and sleep.waits == []
    assert caught.value.partial_text == "partial"


async def test_stream_fails_over_to_the_next_provider():
    wrapper, _, _ = reliable(FakeProvider("primary", auth_error()), FakeProvider("backup", "hi"))

    events = [e async for e in wrapper.stream(request())]

    assert events[-1].response.provider == "backup"


async def test_stream_through_an_http_provider_with_a_connection_error_then_success():
    body = (b'data: {"choices": [{"index": 0, "delta": {"content": "ok"}, '
            b'"finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
    server = FakeLLMServer(httpx.ConnectError("refused"),
                           httpx.Response(200, content=body))
    # The fake server repeats its last response, so the retry gets the stream.
    primary = OpenAIProvider("http://localhost:8080/v1", http_client=server.client())
    wrapper, sleep, log = reliable(primary)

    events = [e async for e in wrapper.stream(request("local"))]

    assert events[-1].response.text == "ok"
    assert len(server.requests) == 2 and sleep.waits == [0.5]
    assert "Could not connect" in log.events[0].error


# -- the rest ----------------------------------------------------------------------------------------
def test_capabilities_come_from_the_primary():
    primary = OpenAIProvider(api_key="k")
    wrapper = ReliableProvider([primary, FakeProvider("other")])

    assert wrapper.capabilities_for("gpt-4o") == primary.capabilities_for("gpt-4o")
    assert wrapper.name == "openai" and KEY not in repr(wrapper)


def test_truncate_for_context_works_on_messages():
    history = [Message.system("s"), Message.user("a"), Message.assistant("b"), Message.user("c")]

    dropped = truncate_for_context(history)

    assert dropped == 1
    assert [m.text for m in history] == ["s", "b", "c"]


def test_a_wrapper_needs_a_provider():
    with pytest.raises(ValueError, match="at least one provider"):
        ReliableProvider([])
