"""The OpenAI-compatible provider reads what the official ``openai`` SDK reads.

Every fixture is built from the SDK's own types and served, whole and in 3- and 7-byte network
reads, both to ``OpenAIProvider`` and to ``openai.AsyncOpenAI``. Where the SDK reads a finished
answer the provider must read the same one; where the SDK reads an unfinished one (no finish
reason, an error, a broken connection) the provider must fail retryably and hand back the same
partial text.
"""

from __future__ import annotations

import json

import pytest
from openai.types import ErrorObject
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice as CompletionChoice
from openai.types.chat.chat_completion_chunk import (
    Choice,
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
)
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.completion_usage import (
    CompletionTokensDetails,
    CompletionUsage,
    PromptTokensDetails,
)

from agents.runtime.messages import ThinkingBlock
from agents.runtime.pricing import Usage
from agents.runtime.providers.base import ChatRequest, ErrorKind, Outcome
from agents.runtime.providers.openai import OpenAIProvider
from agents.runtime.tools import ToolSpec

from .sdk_wire import (
    READ_SIZES,
    OpenAIReading,
    Ours,
    openai_sdk_create,
    openai_sdk_stream,
    openai_sse,
    read_stream,
    server,
)

MODEL = "gpt-4o-2024-08-06"
CALC = ToolSpec("calculator", "Evaluate arithmetic.",
                {"type": "object", "properties": {"expression": {"type": "string"}}})
TIME = ToolSpec("current_time", "The current time.",
                {"type": "object", "properties": {"timezone": {"type": "string"}}})

reads = pytest.mark.parametrize("read_size", READ_SIZES, ids=["whole", "3-byte", "7-byte"])


# -- fixtures from the SDK's types ------------------------------------------------------------------
def chunk(*, finish: str | None = None, usage: CompletionUsage | None = None,
          choices: bool = True, **delta: object) -> ChatCompletionChunk:
    extra = {"usage": usage} if usage is not None else {}
    listed = [Choice(index=0, delta=ChoiceDelta(**delta), finish_reason=finish)] if choices else []
    return ChatCompletionChunk(id="chatcmpl-wire", created=1_767_225_600, model=MODEL,
                               object="chat.completion.chunk", choices=listed, **extra)


def call(index: int, *, id: str | None = None, name: str | None = None,
         arguments: str | None = None) -> ChoiceDeltaToolCall:
    function = ChoiceDeltaToolCallFunction(
        **{k: v for k, v in (("name", name), ("arguments", arguments)) if v is not None})
    head = {"id": id, "type": "function"} if id else {}
    return ChoiceDeltaToolCall(index=index, function=function, **head)


def usage_chunk(usage: CompletionUsage) -> ChatCompletionChunk:
    """The last chunk when ``stream_options.include_usage`` is set: no choices, only usage."""
    return chunk(choices=False, usage=usage)


USAGE = CompletionUsage(prompt_tokens=20, completion_tokens=4, total_tokens=24,
                        prompt_tokens_details=PromptTokensDetails(cached_tokens=8))

TEXT = [chunk(role="assistant", content=""), chunk(content="Hel"), chunk(content="lo w"),
        chunk(content="örld ✓"), chunk(finish="stop"), usage_chunk(USAGE)]

PARALLEL_CALLS = [
    chunk(role="assistant", tool_calls=[call(0, id="call_a", name="calculator", arguments="")]),
    chunk(tool_calls=[call(0, arguments='{"expr')]),
    chunk(tool_calls=[call(0, arguments='ession": "12*7"}')]),
    chunk(tool_calls=[call(1, id="call_b", name="current_time", arguments="")]),
    chunk(tool_calls=[call(1, arguments='{"timezone": "Europe/Zürich"}')]),
    chunk(finish="tool_calls"),
    usage_chunk(USAGE),
]

INTERLEAVED = [
    chunk(role="assistant", content="Let me check. "),
    chunk(tool_calls=[call(0, id="call_a", name="calculator", arguments='{"expression": "1+1"}')]),
    chunk(content="And the time."),
    chunk(tool_calls=[call(1, id="call_b", name="current_time", arguments="{}")]),
    chunk(finish="tool_calls"),
]

REASONING = [
    chunk(role="assistant", reasoning_content="Six times "),
    chunk(reasoning_content="seven."),
    chunk(content="42"),
    chunk(finish="stop"),
    usage_chunk(CompletionUsage(
        prompt_tokens=30, completion_tokens=50, total_tokens=80,
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=45))),
]

REFUSAL = [chunk(role="assistant", refusal="I'm sorry, "), chunk(refusal="I can't help with that."),
           chunk(finish="stop"), usage_chunk(USAGE)]

LENGTH_IN_TEXT = [chunk(role="assistant", content="The answer is a long"), chunk(finish="length"),
                  usage_chunk(USAGE)]

LENGTH_IN_CALL = [
    chunk(role="assistant", tool_calls=[call(0, id="call_a", name="calculator",
                                             arguments='{"expression": "1+1"}')]),
    chunk(tool_calls=[call(1, id="call_b", name="calculator", arguments='{"expression": "2')]),
    chunk(finish="length"),
    usage_chunk(USAGE),
]


async def both(chunks_body: bytes, read_size: int | None, *, tools: list[ToolSpec] | None = None,
               broken: bool = False) -> tuple[Ours, OpenAIReading]:
    fake = server(chunks_body, read_size, broken=broken)
    provider = OpenAIProvider("https://api.openai.com/v1", api_key="sk-fixture",
                              http_client=fake.client())
    ours = await read_stream(provider, ChatRequest(model="gpt-4o", messages=[], tools=tools))
    return ours, await openai_sdk_stream(chunks_body, read_size, broken=broken)


def assert_reads_as_the_sdk(ours: Ours, sdk: OpenAIReading) -> None:
    if sdk.error is not None or sdk.finish_reason is None:
        # The SDK read an unfinished answer: the provider fails retryably, keeping the text.
        assert ours.error is not None and ours.error.retryable
        assert ours.error.partial_text == sdk.visible == ours.streamed_text
        return
    response = ours.response
    assert response.text == sdk.visible == ours.streamed_text
    assert ours.streamed_thinking == sdk.reasoning
    thinking = [b.thinking for b in response.message.blocks if isinstance(b, ThinkingBlock)]
    assert thinking == ([sdk.reasoning] if sdk.reasoning else [])
    assert response.raw["finish_reason"] == sdk.finish_reason
    assert [(c.id, c.name) for c in response.tool_calls] == [(i, n) for i, n, _ in sdk.tool_calls]
    for ours_call, (_, _, arguments) in zip(response.tool_calls, sdk.tool_calls, strict=True):
        if ours_call.arguments_error is None:
            assert ours_call.input == json.loads(arguments)
        else:
            assert ours_call.input == {} and arguments in ours_call.arguments_error
    assert response.usage == Usage.from_openai(sdk.usage)


# -- streams the SDK reads as finished -----------------------------------------------------------
@reads
async def test_streamed_text_reads_as_the_sdk_reads_it(read_size):
    ours, sdk = await both(openai_sse(TEXT), read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.text == "Hello wörld ✓"
    assert ours.response.outcome is Outcome.COMPLETE
    assert ours.response.usage == Usage(input_tokens=12, output_tokens=4, cache_read_tokens=8)


@reads
async def test_streamed_parallel_tool_calls_read_as_the_sdk_reads_them(read_size):
    ours, sdk = await both(openai_sse(PARALLEL_CALLS), read_size, tools=[CALC, TIME])

    assert_reads_as_the_sdk(ours, sdk)
    assert [(c.id, c.name, c.input) for c in ours.response.tool_calls] == [
        ("call_a", "calculator", {"expression": "12*7"}),
        ("call_b", "current_time", {"timezone": "Europe/Zürich"})]
    assert ours.response.outcome is Outcome.TOOL_USE


@reads
async def test_text_interleaved_with_tool_calls_reads_as_the_sdk_reads_it(read_size):
    ours, sdk = await both(openai_sse(INTERLEAVED), read_size, tools=[CALC, TIME])

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.text == "Let me check. And the time."
    assert [c.name for c in ours.response.tool_calls] == ["calculator", "current_time"]


@reads
async def test_streamed_reasoning_reads_as_the_sdk_reads_it(read_size):
    ours, sdk = await both(openai_sse(REASONING), read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.streamed_thinking == "Six times seven."
    assert ours.response.usage == Usage(input_tokens=30, output_tokens=50, reasoning_tokens=45)


USAGE_SHAPES = {
    "cached": (CompletionUsage(prompt_tokens=2000, completion_tokens=300, total_tokens=2300,
                               prompt_tokens_details=PromptTokensDetails(cached_tokens=1536)),
               Usage(input_tokens=464, output_tokens=300, cache_read_tokens=1536)),
    "cache write": (
        CompletionUsage(prompt_tokens=2000, completion_tokens=300, total_tokens=2300,
                        prompt_tokens_details=PromptTokensDetails(cached_tokens=500,
                                                                  cache_write_tokens=1200)),
        Usage(input_tokens=300, output_tokens=300, cache_write_tokens=1200,
              cache_read_tokens=500)),
    "reasoning": (
        CompletionUsage(prompt_tokens=100, completion_tokens=300, total_tokens=400,
                        completion_tokens_details=CompletionTokensDetails(
                            reasoning_tokens=256, accepted_prediction_tokens=0,
                            rejected_prediction_tokens=0)),
        Usage(input_tokens=100, output_tokens=300, reasoning_tokens=256)),
    "audio and text parts": (
        CompletionUsage(prompt_tokens=100, completion_tokens=10, total_tokens=110,
                        prompt_tokens_details=PromptTokensDetails(
                            audio_tokens=40, text_tokens=60, image_tokens=0, cached_tokens=0)),
        Usage(input_tokens=100, output_tokens=10)),
}


@reads
@pytest.mark.parametrize("shape", list(USAGE_SHAPES))
@pytest.mark.parametrize("where", ["empty-choices chunk", "finish chunk"])
async def test_every_usage_shape_reads_as_the_sdk_reads_it(read_size, shape, where):
    usage, expected = USAGE_SHAPES[shape]
    if where == "empty-choices chunk":
        chunks = [chunk(role="assistant", content="ok"), chunk(finish="stop"), usage_chunk(usage)]
    else:  # servers that put the usage on the last chunk with its choice (Ollama, vLLM)
        chunks = [chunk(role="assistant", content="ok"), chunk(finish="stop", usage=usage)]

    ours, sdk = await both(openai_sse(chunks), read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.usage == expected
    assert ours.response.usage.prompt_tokens == usage.prompt_tokens


@reads
async def test_a_streamed_refusal_is_visible_text_and_flagged(read_size):
    ours, sdk = await both(openai_sse(REFUSAL), read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.text == "I'm sorry, I can't help with that."
    assert ours.response.outcome is Outcome.REFUSAL
    assert sdk.refusal == ours.response.text and sdk.content == ""


@reads
async def test_length_in_text_keeps_the_text_and_says_it_was_cut(read_size):
    ours, sdk = await both(openai_sse(LENGTH_IN_TEXT), read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.text == "The answer is a long"
    assert ours.response.outcome is Outcome.LENGTH


@reads
async def test_length_inside_a_tool_call_keeps_the_call_but_never_runs_it(read_size):
    ours, sdk = await both(openai_sse(LENGTH_IN_CALL), read_size, tools=[CALC])

    assert_reads_as_the_sdk(ours, sdk)
    whole, cut = ours.response.tool_calls
    assert whole.input == {"expression": "1+1"} and whole.arguments_error is None
    assert cut.id == "call_b" and cut.input == {}
    assert "output token limit" in cut.arguments_error
    assert ours.response.outcome is Outcome.LENGTH


@reads
async def test_finish_without_done_is_a_whole_answer(read_size):
    ours, sdk = await both(openai_sse(TEXT, done=False), read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.text == "Hello wörld ✓"


# -- streams that did not finish ---------------------------------------------------------------
@reads
async def test_an_error_chunk_mid_stream_fails_retryably_with_the_partial_text(read_size):
    error = {"error": ErrorObject(message="The server had an error while processing your "
                                          "request.", type="server_error", code=None,
                                  param=None).model_dump(exclude_unset=True)}
    body = openai_sse(TEXT[:3], done=False) + b"data: " + json.dumps(error).encode() + b"\n\n"

    ours, sdk = await both(body, read_size)

    assert sdk.error is not None
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.kind is ErrorKind.SERVER and ours.error.partial_text == "Hello w"
    assert "had an error while processing" in ours.error.detail


@reads
async def test_a_stream_cut_off_mid_text_is_a_retryable_cut_off(read_size):
    full = openai_sse(TEXT)
    body = full[:full.index(b"\xc3\xb6rld")]  # inside the third chunk's JSON

    ours, sdk = await both(body, read_size)

    assert sdk.finish_reason is None and sdk.visible == "Hello w"
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.kind is ErrorKind.MALFORMED and "cut off" in ours.error.message


@reads
async def test_a_stream_cut_off_mid_tool_call_is_a_retryable_cut_off(read_size):
    full = openai_sse(PARALLEL_CALLS)
    body = full[:full.index(b"Europe")]

    ours, sdk = await both(body, read_size, tools=[CALC, TIME])

    assert sdk.finish_reason is None and sdk.tool_calls
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.kind is ErrorKind.MALFORMED and "cut off" in ours.error.message


@reads
async def test_whole_chunks_without_finish_or_done_are_a_cut_off(read_size):
    ours, sdk = await both(openai_sse(TEXT[:4], done=False), read_size)

    assert sdk.visible == "Hello wörld ✓"
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.partial_text == "Hello wörld ✓"


@reads
async def test_a_connection_broken_mid_answer_is_a_retryable_network_error(read_size):
    ours, sdk = await both(openai_sse(TEXT[:3], done=False), read_size, broken=True)

    assert sdk.error is not None
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.kind is ErrorKind.NETWORK and ours.error.partial_text == "Hello w"


@reads
async def test_unreadable_chunks_then_done_are_an_error_not_an_empty_answer(read_size):
    body = b"data: {oops\n\ndata: <html>502</html>\n\n" + openai_sse([])

    ours, sdk = await both(body, read_size)

    assert sdk.error is not None  # the SDK cannot parse them either
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.kind is ErrorKind.MALFORMED and ours.error.partial_text == ""


# -- whole responses -------------------------------------------------------------------------------
def completion(message: ChatCompletionMessage, finish: str,
               usage: CompletionUsage = USAGE) -> bytes:
    return ChatCompletion(
        id="chatcmpl-wire", created=1_767_225_600, model=MODEL, object="chat.completion",
        choices=[CompletionChoice(index=0, message=message, finish_reason=finish,
                                  logprobs=None)],
        usage=usage).model_dump_json(exclude_unset=True).encode()


def function_call(id: str, name: str, arguments: str) -> ChatCompletionMessageFunctionToolCall:
    return ChatCompletionMessageFunctionToolCall(
        id=id, type="function", function=Function(name=name, arguments=arguments))


COMPLETIONS = {
    "text": (ChatCompletionMessage(role="assistant", content="Hello wörld ✓", refusal=None),
             "stop", Outcome.COMPLETE),
    "parallel tool calls": (ChatCompletionMessage(
        role="assistant", content=None, refusal=None, tool_calls=[
            function_call("call_a", "calculator", '{"expression": "2+2"}'),
            function_call("call_b", "current_time", "{}")]), "tool_calls", Outcome.TOOL_USE),
    "text and tool calls": (ChatCompletionMessage(
        role="assistant", content="Checking.", refusal=None,
        tool_calls=[function_call("call_a", "calculator", '{"expression": "2+2"}')]),
        "tool_calls", Outcome.TOOL_USE),
    "reasoning": (ChatCompletionMessage(role="assistant", content="42", refusal=None,
                                        reasoning_content="Six times seven."),
                  "stop", Outcome.COMPLETE),
    "refusal": (ChatCompletionMessage(role="assistant", content=None,
                                      refusal="I'm sorry, I can't help with that."),
                "stop", Outcome.REFUSAL),
    "length in text": (ChatCompletionMessage(role="assistant", content="The answer is a long",
                                             refusal=None), "length", Outcome.LENGTH),
    "length in a tool call": (ChatCompletionMessage(
        role="assistant", content=None, refusal=None,
        tool_calls=[function_call("call_a", "calculator", '{"expression": "2')]),
        "length", Outcome.LENGTH),
}


@reads
@pytest.mark.parametrize("case", list(COMPLETIONS))
async def test_a_whole_completion_reads_as_the_sdk_reads_it(read_size, case):
    message, finish, outcome = COMPLETIONS[case]
    body = completion(message, finish, USAGE_SHAPES["cache write"][0])
    fake = server(body, read_size, content_type="application/json")
    provider = OpenAIProvider("https://api.openai.com/v1", api_key="sk-fixture",
                              http_client=fake.client())

    response = await provider.chat(ChatRequest(model="gpt-4o", messages=[], tools=[CALC, TIME]))
    sdk = await openai_sdk_create(body)

    assert response.text == sdk.visible
    thinking = [b.thinking for b in response.message.blocks if isinstance(b, ThinkingBlock)]
    assert thinking == ([sdk.reasoning] if sdk.reasoning else [])
    assert [(c.id, c.name) for c in response.tool_calls] == [(i, n) for i, n, _ in sdk.tool_calls]
    for ours_call, (_, _, arguments) in zip(response.tool_calls, sdk.tool_calls, strict=True):
        if outcome is Outcome.LENGTH:
            assert ours_call.input == {} and "output token limit" in ours_call.arguments_error
        else:
            assert ours_call.input == json.loads(arguments) and ours_call.arguments_error is None
    assert response.outcome is outcome
    assert response.usage == Usage.from_openai(sdk.usage) == USAGE_SHAPES["cache write"][1]
