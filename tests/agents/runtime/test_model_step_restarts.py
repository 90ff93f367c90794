"""The model step: a restarted stream keeps only the answer that finished, a server that
reports no usage is estimated and flagged, and text streamed before a provider error stays."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from agents.runtime import tokenizer
from agents.runtime.events import (
    LlmRequestFinished,
    LlmStreamRestarted,
    TextDelta,
    TurnError,
)
from agents.runtime.loop import TurnStatus, estimate_request_usage
from agents.runtime.messages import Message, Role, ToolUseBlock
from agents.runtime.pricing import Usage
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
from agents.runtime.providers.reliable import ReliableProvider

from .providers.test_reliable import FakeSleep
from .providers.test_reliable_failover import FakeCutStream, cut_off
from .scripted_provider import FakeScriptedProvider, answer
from .test_loop import config, turn


class FakeEvents(Provider):
    """Streams a fixed list of events (a runtime-level fake of a provider); a trailing
    exception is raised."""

    kind = "fake"

    def __init__(self, *events: StreamEvent | Exception) -> None:
        super().__init__(name="fake", capabilities={"streaming": True})
        self.events = list(events)
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:  # pragma: no cover - streams
        raise AssertionError("streams only")

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        for event in self.events:
            if isinstance(event, Exception):
                raise event
            yield event


# -- a restarted stream -------------------------------------------------------------------------------
async def test_after_a_restart_on_the_same_provider_only_the_new_answer_is_kept():
    primary = FakeCutStream("primary", ("Half an ", cut_off()), "The whole answer.")
    wrapper = ReliableProvider([primary], sleep=FakeSleep())

    result, observer = await turn(wrapper)

    assert result.status is TurnStatus.COMPLETED
    assert result.text == "The whole answer."
    assert [m.text for m in result.new_messages if m.role is Role.ASSISTANT] == [
        "The whole answer."]
    (restarted,) = observer.of(LlmStreamRestarted)
    assert restarted.partial_text == "Half an "
    assert (restarted.provider, restarted.next_provider) == ("primary", "primary")
    # The chat saw the void text, then the restart, then the answer from its start.
    at = observer.events.index(restarted)
    before = [e.text for e in observer.events[:at] if isinstance(e, TextDelta)]
    after = [e.text for e in observer.events[at:] if isinstance(e, TextDelta)]
    assert ("".join(before), "".join(after)) == ("Half an ", "The whole answer.")


async def test_after_a_restart_on_the_fallback_only_the_fallbacks_answer_is_kept():
    primary = FakeCutStream("primary", ("Broken <tool_call>{\"name\": ", cut_off()))
    fallback = FakeCutStream("fallback", "From the fallback.")
    wrapper = ReliableProvider([primary, fallback], max_retries=0, sleep=FakeSleep())

    result, observer = await turn(wrapper, cfg=config(dispatcher="xml"))

    assert result.text == "From the fallback."
    (restarted,) = observer.of(LlmStreamRestarted)
    assert restarted.partial_text == "Broken <tool_call>{\"name\": "
    assert restarted.next_provider == "fallback"
    after = observer.events.index(restarted)
    # The markup held back before the restart is dropped, not shown in front of the new answer.
    assert "".join(e.text for e in observer.events[after:] if isinstance(e, TextDelta)) == (
        "From the fallback.")


async def test_a_restarted_answer_counts_the_void_attempt_by_estimate():
    reported = Usage(input_tokens=10, output_tokens=5)
    provider = FakeEvents(StreamText("Void text"),
                          StreamRestart(reason="It broke off.", partial_text="Void text"),
                          StreamText("Kept."), StreamDone(answer("Kept.", usage=reported)))

    result, observer = await turn(provider)

    finished = observer.of(LlmRequestFinished)[0]
    request = provider.requests[0]
    assert finished.usage == reported + estimate_request_usage(request, "Void text")
    assert finished.usage_estimated and result.usage == finished.usage


# -- usage a server did not report --------------------------------------------------------------------
@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_without_usage_is_estimated_and_flagged(stream):
    provider = FakeScriptedProvider([answer("Hello there, friend.", usage=Usage())])

    result, observer = await turn(provider, cfg=config(stream=stream))

    finished = observer.of(LlmRequestFinished)[0]
    assert finished.usage_estimated
    assert finished.usage.output_tokens == math.ceil(len("Hello there, friend.") / 4)
    assert finished.usage.input_tokens > 0
    assert result.usage == finished.usage


async def test_an_empty_answer_without_usage_still_counts_its_input_by_estimate():
    provider = FakeScriptedProvider([answer("", usage=Usage())])
    _, observer = await turn(provider)
    finished = observer.of(LlmRequestFinished)[0]
    assert finished.usage_estimated and finished.usage.input_tokens > 0
    assert finished.usage.output_tokens == 0


async def test_a_call_with_unreadable_arguments_is_estimated_by_what_was_sent():
    raw = '{"zone": "Europe/Paris, or perhaps ' + "the long way round " * 25  # cut, not JSON
    block = ToolUseBlock(id="c1", name="current_time", input={},
                         arguments_error=f"The arguments were not valid JSON: {raw}")
    provider = FakeScriptedProvider([
        ChatResponse(message=Message(Role.ASSISTANT, [block]), usage=Usage(), model="fake-model",
                     provider="fake", stop_reason="tool_use"),
        answer("done")])
    _, observer = await turn(provider)
    finished = observer.of(LlmRequestFinished)[0]
    assert finished.usage_estimated
    assert finished.usage.output_tokens >= len(raw) // 4


async def test_reported_usage_is_kept_and_not_flagged():
    provider = FakeScriptedProvider([answer("Hi.", usage=Usage(input_tokens=7, output_tokens=2))])

    _, observer = await turn(provider)

    finished = observer.of(LlmRequestFinished)[0]
    assert finished.usage == Usage(input_tokens=7, output_tokens=2)
    assert not finished.usage_estimated


async def test_an_openai_model_is_estimated_with_its_own_tokenizer():
    pytest.importorskip("bpe_openai")
    text = "Tokenizers count words, not characters: antidisestablishmentarianism!"
    provider = FakeScriptedProvider([answer(text, usage=Usage())])

    _, observer = await turn(provider, cfg=config(model="gpt-4o-mini"))

    finished = observer.of(LlmRequestFinished)[0]
    assert finished.usage_estimated
    assert finished.usage.output_tokens == tokenizer.count_tokens(text, "gpt-4o-mini")
    assert finished.usage.output_tokens != math.ceil(len(text) / 4)


# -- a provider error after text ------------------------------------------------------------------
async def test_text_streamed_before_a_provider_error_is_kept_and_the_details_are_traced():
    error = ProviderError("The model provider “fake” could not be reached. Try again in a minute "
                          "or check the providers in the admin.", retryable=True,
                          kind=ErrorKind.NETWORK, details="provider=fake model=m attempt 1/1: x")
    provider = FakeEvents(StreamText("Here is the first "), StreamText("half"), error)

    result, observer = await turn(provider)

    assert result.status is TurnStatus.FAILED
    assert result.text == "Here is the first half"
    assert result.new_messages[-1].role is Role.ASSISTANT
    assert result.new_messages[-1].text == "Here is the first half"
    (failed,) = observer.of(TurnError)
    assert failed.message == error.message
    assert failed.details == "provider=fake model=m attempt 1/1: x"
    finished = observer.of(LlmRequestFinished)[0]
    assert finished.response == {"partial_text": "Here is the first half",
                                 "attempts": "provider=fake model=m attempt 1/1: x"}
    assert finished.usage_estimated


# -- the tokenizer ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("model", "encoding"), [
    ("gpt-4o", "o200k_base"), ("gpt-4o-mini-2024-07-18", "o200k_base"),
    ("openai/gpt-5.1", "o200k_base"), ("o3-mini", "o200k_base"), ("gpt-4-turbo", "cl100k_base"),
    ("gpt-3.5-turbo", "cl100k_base"), ("claude-sonnet-4-5", None), ("smollm2-135m", None),
    ("o1x", None), ("", None),
])
def test_the_encoding_follows_the_model_family(model, encoding):
    assert tokenizer.encoding_name(model) == encoding


def test_without_a_known_tokenizer_the_rule_is_characters_over_four():
    assert tokenizer.count_tokens("abcde", "claude-sonnet-4-5") == 2
    assert tokenizer.tokenizer_name("claude-sonnet-4-5") == "chars/4"
    assert tokenizer.count_tokens("", None) == 0


def test_a_known_tokenizer_counts_real_tokens_and_special_tokens_as_text():
    pytest.importorskip("bpe_openai")
    assert tokenizer.tokenizer_name("gpt-4o") == "o200k_base"
    assert tokenizer.count_tokens("Hello, world!", "gpt-4o") == 4
    assert tokenizer.count_tokens("a <|endoftext|> b", "gpt-4o") > 3
