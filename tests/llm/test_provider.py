"""The OpenAI-compatible provider and the agent loop against a real llama.cpp server.

The model (SmolLM2-135M) is tiny: these tests check form, not quality. A tool call is forced
with ``tool_choice`` naming the tool (the provider's ``extra_body``), which llama-cpp-python
answers with a native ``tool_calls`` message whose arguments are generated under a grammar
built from the tool's schema, so even this model calls reliably. The server's chat template is
the one inside the GGUF (SmolLM2's ChatML), which is what a user who starts the server
without options gets.
"""

from __future__ import annotations

import pytest

from agents.runtime.builtin import CurrentTimeTool
from agents.runtime.events import LlmRequestFinished, RecordingObserver, TextDelta, ToolFinished
from agents.runtime.loop import TurnConfig, run_turn
from agents.runtime.loop.model_step import window_from_error
from agents.runtime.messages import Message, Role, ToolResultBlock
from agents.runtime.providers.base import (
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Outcome,
    ProviderError,
    StreamDone,
    StreamText,
)
from agents.runtime.providers.openai import OpenAIProvider
from agents.runtime.tools import ToolSpec
from tests.llm.live import API_KEY, LIVE, MODEL, URL, server_streams_usage
from tests.llm.server import N_CTX

pytestmark = LIVE

TIME = CurrentTimeTool()
# The clock tool as offered to the model: its zone from a list, so that the arguments the
# grammar lets the model write are always a zone the tool knows (free text from this model is
# sometimes a sentence with raw control characters in it).
ZONES = ["Asia/Tokyo", "Europe/Berlin", "UTC"]
TIME_SPEC = ToolSpec(TIME.name, TIME.description, {
    "type": "object", "required": ["timezone"],
    "properties": {"timezone": {"type": "string", "enum": ZONES}}})


class ZonedClock(CurrentTimeTool):
    """The real clock tool, offered with ``TIME_SPEC``'s parameters."""

    parameters = TIME_SPEC.parameters  # noqa: RUF012


FORCE_TIME = {"tool_choice": {"type": "function", "function": {"name": TIME.name}}}
QUESTION = "What time is it in Tokyo?"


async def ask(request: ChatRequest, *, stream: bool, **options) -> tuple[ChatResponse, list[str]]:
    """One request through the provider; the response and the text pieces streamed."""
    provider = OpenAIProvider(URL, API_KEY, timeout=120, **options)
    try:
        if not stream:
            return await provider.chat(request), []
        events = [event async for event in provider.stream(request)]
    finally:
        await provider.aclose()
    assert isinstance(events[-1], StreamDone), events[-1]
    return events[-1].response, [e.text for e in events if isinstance(e, StreamText)]


async def test_a_plain_answer_comes_back_with_its_token_counts():
    request = ChatRequest(model=MODEL, messages=[Message.user("Say hello to Ada.")],
                          max_tokens=24, temperature=0)
    response, _ = await ask(request, stream=False)

    assert response.text.strip()
    assert not response.tool_calls
    assert response.outcome in (Outcome.COMPLETE, Outcome.LENGTH), response.stop_reason
    assert response.usage.input_tokens > 5 and response.usage.output_tokens > 0, response.usage


async def test_a_plain_answer_streams_piece_by_piece_and_ends_with_a_finish_reason():
    request = ChatRequest(model=MODEL, messages=[Message.user("Name three colours.")],
                          max_tokens=32, temperature=0)
    response, pieces = await ask(request, stream=True)

    assert len(pieces) >= 3, pieces
    assert response.text == "".join(pieces) and response.text.strip()
    assert response.stop_reason in ("stop", "length"), response.raw


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_forced_tool_call_runs_and_its_result_is_answered(stream):
    ask_time = ChatRequest(model=MODEL, tools=[TIME_SPEC], max_tokens=64, temperature=0,
                           messages=[Message.user(QUESTION)])
    called, _ = await ask(ask_time, stream=stream, extra_body=FORCE_TIME)

    assert called.outcome is Outcome.TOOL_USE, called.stop_reason
    [call] = called.tool_calls
    assert call.name == TIME.name and call.id and call.arguments_error is None
    assert call.input.get("timezone") in ZONES, call.input
    result = await TIME.execute(call.input)
    assert result.success and f"time zone {call.input['timezone']}" in result.output, result

    # The assistant message holds only the tool call: the request that sends it back must be
    # one the server accepts (SmolLM2's template cannot render a null content: a 500).
    assert called.message.text == ""
    answer_it = ChatRequest(
        model=MODEL, tools=[TIME_SPEC], max_tokens=48, temperature=0,
        messages=[Message.user(QUESTION), called.message,
                  Message.tool_results([ToolResultBlock(call.id, result.output, name=TIME.name)])])
    answered, pieces = await ask(answer_it, stream=stream)

    assert answered.text.strip() and not answered.tool_calls
    assert answered.outcome in (Outcome.COMPLETE, Outcome.LENGTH), answered.stop_reason
    if stream:
        assert answered.text == "".join(pieces)


async def test_a_streamed_turn_reports_tokens_for_every_model_request_or_flags_them_estimated():
    """llama.cpp sends no usage while streaming: each request's tokens are then the runtime's
    estimate, flagged as such, and never a silent zero."""
    provider = OpenAIProvider(URL, API_KEY, timeout=120, extra_body=FORCE_TIME)
    observer = RecordingObserver()
    config = TurnConfig(model=MODEL, system_prompt="You tell the time.", max_tool_iterations=1,
                        dispatcher="native", temperature=0, max_tokens=48)
    try:
        result = await run_turn(provider=provider, config=config, history=[], tools=[ZonedClock()],
                                user_message=QUESTION, observer=observer)
    finally:
        await provider.aclose()

    finished = [e for e in observer.events if isinstance(e, LlmRequestFinished)]
    assert [e.success for e in finished] == [True, True], [e.error for e in finished]
    tools = [e for e in observer.events if isinstance(e, ToolFinished)]
    assert [(t.name, t.success) for t in tools] == [(TIME.name, True)]
    assert any(isinstance(e, TextDelta) for e in observer.events)
    assert result.text.strip()
    server_counts = server_streams_usage()
    for request in finished:
        usage = request.usage
        assert usage.input_tokens > 0 and usage.output_tokens > 0, (request.iteration, usage)
        # Either the server's own counts, or an estimate that says it is one.
        assert server_counts or request.usage_estimated, (request.iteration, usage)
    assert [m.role for m in result.history][-3:] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]


# -- a context window that is too small ----------------------------------------------------------
LONG = "The quick brown fox jumps over the lazy dog. " * 1_000  # about 10k tokens: over the window


@pytest.mark.parametrize("stream", [False, True])
async def test_a_prompt_over_the_servers_window_is_an_overflow_that_names_the_window(stream):
    request = ChatRequest(model=MODEL, messages=[Message.user(LONG)], max_tokens=16)
    with pytest.raises(ProviderError) as caught:
        await ask(request, stream=stream)
    error = caught.value
    # Streamed, the server sends an empty 200: the provider asks again unstreamed for its words.
    assert error.kind == ErrorKind.CONTEXT_OVERFLOW, error.message
    assert window_from_error(error.message) == N_CTX


async def test_later_turns_work_after_one_too_big_for_the_window():
    # The admin set the window too large (65,536; the server holds 4,096): a turn with a huge
    # message fails saying why, and the next turns still answer, the huge one left out.
    provider = OpenAIProvider(URL, API_KEY, timeout=120)
    history: list[Message] = []
    config = TurnConfig(model=MODEL, system_prompt="Answer briefly.", max_tokens=24,
                        temperature=0, context_window=65_536, answer_reserve=24)
    try:
        big = await run_turn(provider=provider, config=config, history=history,
                             user_message=LONG, tools=[], observer=RecordingObserver())
        assert big.status.value == "failed" and f"{N_CTX:,}" in big.error, big.error
        history = big.history
        for question in ("What is 5 + 5?", "Say hello."):
            config = TurnConfig(model=MODEL, system_prompt="Answer briefly.", max_tokens=24,
                                temperature=0, context_window=65_536, answer_reserve=24)
            result = await run_turn(provider=provider, config=config, history=history,
                                    user_message=question, tools=[],
                                    observer=RecordingObserver())
            assert result.status.value == "completed", result.error
            assert result.text.strip()
            history = result.history
    finally:
        await provider.aclose()


async def test_a_conversation_longer_than_the_window_keeps_answering():
    # The window configured as the server's: each message fits, the conversation soon does
    # not. Every request is fitted before it is sent (compacted or trimmed, by estimate), so
    # the server never refuses one, and every turn answers.
    provider = OpenAIProvider(URL, API_KEY, timeout=120)
    paragraph = "Notes on the garden: the roses need water on Mondays and the ferns like shade. "
    history: list[Message] = []
    requests: list[LlmRequestFinished] = []
    try:
        for n in range(5):
            observer = RecordingObserver()
            config = TurnConfig(model=MODEL, system_prompt="Answer briefly.", max_tokens=24,
                                temperature=0, context_window=N_CTX, answer_reserve=24)
            result = await run_turn(provider=provider, config=config, history=history,
                                    user_message=f"Part {n}. " + paragraph * 60 + " Say OK.",
                                    tools=[], observer=observer)
            assert result.status.value == "completed", (n, result.error)
            history = result.history
            requests += [e for e in observer.events if isinstance(e, LlmRequestFinished)]
    finally:
        await provider.aclose()
    assert all(r.success for r in requests)
    # the five messages together are about twice the window: something was left out or summarised
    assert sum(len(m.text) for m in history) < 5 * len(paragraph) * 60
