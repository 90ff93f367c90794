"""The Anthropic provider reads what the official ``anthropic`` SDK reads.

Every fixture is built from the SDK's own types (``RawMessageStreamEvent`` variants,
``Message``, ``Usage``) and served, whole and in 3- and 7-byte network reads, both to
``AnthropicProvider`` and to ``anthropic.AsyncAnthropic``'s ``messages.stream(...)``. Where the
SDK reads a finished message the provider must read the same blocks, stop reason and usage;
where the SDK's stream failed or stopped early the provider must fail retryably and hand back
the same partial text.
"""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import (
    ErrorResponse,
    InputJSONDelta,
    Message,
    MessageDeltaUsage,
    OutputTokensDetails,
    OverloadedErrorObject,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RefusalStopDetails,
    SignatureDelta,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
    Usage,
)
from anthropic.types.raw_message_delta_event import Delta

from agents.runtime.messages import TEXT_RUN_SEPARATOR
from agents.runtime.messages import TextBlock as OurText
from agents.runtime.messages import ThinkingBlock as OurThinking
from agents.runtime.messages import ToolUseBlock as OurToolUse
from agents.runtime.pricing import Usage as OurUsage
from agents.runtime.providers.anthropic import AnthropicProvider
from agents.runtime.providers.base import ChatRequest, ErrorKind, Outcome
from agents.runtime.tools import ToolSpec

from .sdk_wire import (
    READ_SIZES,
    AnthropicReading,
    Ours,
    anthropic_sdk_create,
    anthropic_sdk_stream,
    anthropic_sse,
    read_stream,
    server,
)

MODEL = "claude-sonnet-4-6"
CALC = ToolSpec("calculator", "Evaluate arithmetic.",
                {"type": "object", "properties": {"expression": {"type": "string"}}})

reads = pytest.mark.parametrize("read_size", READ_SIZES, ids=["whole", "3-byte", "7-byte"])


# -- fixtures from the SDK's types ------------------------------------------------------------------
def start(usage: Usage | None = None) -> RawMessageStartEvent:
    return RawMessageStartEvent(type="message_start", message=Message(
        id="msg_wire", type="message", role="assistant", model=MODEL, content=[],
        stop_reason=None, stop_sequence=None,
        usage=usage or Usage(input_tokens=25, output_tokens=1)))


def text(index: int, *pieces: str) -> list[Any]:
    return [RawContentBlockStartEvent(type="content_block_start", index=index,
                                      content_block=TextBlock(type="text", text="")),
            *(RawContentBlockDeltaEvent(type="content_block_delta", index=index,
                                        delta=TextDelta(type="text_delta", text=p))
              for p in pieces),
            RawContentBlockStopEvent(type="content_block_stop", index=index)]


def thinking(index: int, signature: str, *pieces: str) -> list[Any]:
    return [RawContentBlockStartEvent(type="content_block_start", index=index,
                                      content_block=ThinkingBlock(type="thinking", thinking="",
                                                                  signature="")),
            *(RawContentBlockDeltaEvent(type="content_block_delta", index=index,
                                        delta=ThinkingDelta(type="thinking_delta", thinking=p))
              for p in pieces),
            RawContentBlockDeltaEvent(type="content_block_delta", index=index,
                                      delta=SignatureDelta(type="signature_delta",
                                                           signature=signature)),
            RawContentBlockStopEvent(type="content_block_stop", index=index)]


def tool_use(index: int, id: str, name: str, *json_pieces: str, stop: bool = True) -> list[Any]:
    events: list[Any] = [
        RawContentBlockStartEvent(type="content_block_start", index=index,
                                  content_block=ToolUseBlock(type="tool_use", id=id, name=name,
                                                             input={})),
        *(RawContentBlockDeltaEvent(type="content_block_delta", index=index,
                                    delta=InputJSONDelta(type="input_json_delta",
                                                         partial_json=p))
          for p in json_pieces)]
    if stop:
        events.append(RawContentBlockStopEvent(type="content_block_stop", index=index))
    return events


def finish(stop_reason: str, usage: MessageDeltaUsage | None = None,
           stop_details: RefusalStopDetails | None = None) -> list[Any]:
    delta = Delta(stop_reason=stop_reason, stop_sequence=None,
                  **({"stop_details": stop_details} if stop_details else {}))
    return [RawMessageDeltaEvent(type="message_delta", delta=delta,
                                 usage=usage or MessageDeltaUsage(output_tokens=12)),
            RawMessageStopEvent(type="message_stop")]


TEXT = [start(), *text(0, "Hello", " wörld", " ✓"), *finish("end_turn")]

PARALLEL_CALLS = [start(), *tool_use(0, "toolu_a", "calculator", '{"expres', 'sion": "12*7"}'),
                  *tool_use(1, "toolu_b", "calculator", "", '{"expression": "1+1"}'),
                  *finish("tool_use")]

INTERLEAVED = [start(), *text(0, "First."), *tool_use(1, "toolu_a", "calculator",
                                                      '{"expression": "2+2"}'),
               *text(2, "Second."), *tool_use(3, "toolu_b", "calculator", "{}"),
               *text(4, "Third."), *finish("tool_use")]

THINKING = [start(), *thinking(0, "EqQBCkYIAxgCKkBsig==", "Two plus ", "two is four."),
            *text(1, "It is 4."),
            *finish("end_turn", MessageDeltaUsage(
                output_tokens=90, output_tokens_details=OutputTokensDetails(thinking_tokens=70)))]

REFUSAL = [start(), *text(0, "I can help with part of that, but"),
           *finish("refusal", stop_details=RefusalStopDetails(
               type="refusal", category="cyber", explanation="The request could enable harm."))]

MAX_TOKENS_IN_TEXT = [start(), *text(0, "The answer is a long"), *finish("max_tokens")]

MAX_TOKENS_IN_CALL = [start(), *text(0, "Writing it."),
                      *tool_use(1, "toolu_a", "calculator", '{"expression": "2', stop=False),
                      *finish("max_tokens")]


async def both(events: list[Any], read_size: int | None, *, raw: bytes = b"",
               broken: bool = False, cut_at: bytes | None = None,
               ) -> tuple[Ours, AnthropicReading]:
    body = anthropic_sse(events) + raw
    if cut_at is not None:
        body = body[:body.index(cut_at)]
    fake = server(body, read_size, broken=broken)
    provider = AnthropicProvider("sk-ant-fixture", http_client=fake.client())
    ours = await read_stream(provider, ChatRequest(model="claude-sonnet-4-5", messages=[],
                                                   tools=[CALC]))
    return ours, await anthropic_sdk_stream(body, read_size, broken=broken)


def our_blocks(message: Any) -> list[dict[str, Any]]:
    blocks = []
    for block in message.blocks:
        if isinstance(block, OurText):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, OurThinking):
            blocks.append({"type": "thinking", "thinking": block.thinking,
                           "signature": block.signature})
        elif isinstance(block, OurToolUse):
            blocks.append({"type": "tool_use", "id": block.id, "name": block.name,
                           "input": block.input})
    return blocks


def sdk_blocks(reading: AnthropicReading, *, cut: bool = False) -> list[dict[str, Any]]:
    """The SDK's blocks in the same shape; empty text blocks are not kept by the provider, and
    a tool call cut by the output limit is kept without its (partial) input."""
    blocks = [{k: v for k, v in b.items() if k in ("type", "text", "thinking", "signature", "id",
                                                    "name", "input")}
              for b in reading.blocks if not (b["type"] == "text" and not b["text"])]
    if cut and blocks and blocks[-1]["type"] == "tool_use":
        blocks[-1]["input"] = {}
    return blocks


def assert_reads_as_the_sdk(ours: Ours, sdk: AnthropicReading) -> None:
    if sdk.error is not None or sdk.stop_reason is None:
        assert ours.error is not None and ours.error.retryable
        assert ours.error.partial_text == TEXT_RUN_SEPARATOR.join(sdk.texts)
        assert ours.streamed_text == ours.error.partial_text
        return
    response = ours.response
    cut = response.outcome is Outcome.LENGTH
    assert our_blocks(response.message) == sdk_blocks(sdk, cut=cut)
    assert response.text == TEXT_RUN_SEPARATOR.join(sdk.texts) == ours.streamed_text
    assert response.stop_reason == sdk.stop_reason
    assert response.usage == OurUsage.from_anthropic(sdk.usage)


# -- streams the SDK reads as finished -----------------------------------------------------------
@reads
async def test_streamed_text_reads_as_the_sdk_reads_it(read_size):
    ours, sdk = await both(TEXT, read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.text == "Hello wörld ✓"
    assert ours.response.outcome is Outcome.COMPLETE


@reads
async def test_streamed_parallel_tool_calls_read_as_the_sdk_reads_them(read_size):
    ours, sdk = await both(PARALLEL_CALLS, read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert [(c.id, c.input) for c in ours.response.tool_calls] == [
        ("toolu_a", {"expression": "12*7"}), ("toolu_b", {"expression": "1+1"})]
    assert ours.response.outcome is Outcome.TOOL_USE


@reads
async def test_text_between_tool_calls_keeps_its_order_and_its_paragraphs(read_size):
    ours, sdk = await both(INTERLEAVED, read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert [b["type"] for b in our_blocks(ours.response.message)] == [
        "text", "tool_use", "text", "tool_use", "text"]
    assert ours.response.text == "First.\n\nSecond.\n\nThird."
    assert ours.streamed_text == ours.response.text


@reads
async def test_signed_thinking_and_thinking_tokens_read_as_the_sdk_reads_them(read_size):
    ours, sdk = await both(THINKING, read_size)

    assert_reads_as_the_sdk(ours, sdk)
    first = ours.response.message.blocks[0]
    assert first == OurThinking("Two plus two is four.", "EqQBCkYIAxgCKkBsig==")
    assert ours.streamed_thinking == "Two plus two is four."
    assert ours.response.usage == OurUsage(input_tokens=25, output_tokens=90,
                                           reasoning_tokens=70)


USAGE_SHAPES = {
    "cache write and read": (
        Usage(input_tokens=50, output_tokens=1, cache_creation_input_tokens=1000,
              cache_read_input_tokens=3000),
        MessageDeltaUsage(output_tokens=80),
        OurUsage(input_tokens=50, output_tokens=80, cache_write_tokens=1000,
                 cache_read_tokens=3000)),
    "cumulative counts in message_delta": (
        Usage(input_tokens=50, output_tokens=1, cache_creation_input_tokens=0,
              cache_read_input_tokens=0),
        MessageDeltaUsage(input_tokens=50, cache_creation_input_tokens=200,
                          cache_read_input_tokens=3000, output_tokens=80),
        OurUsage(input_tokens=50, output_tokens=80, cache_write_tokens=200,
                 cache_read_tokens=3000)),
    "thinking tokens": (
        Usage(input_tokens=50, output_tokens=1),
        MessageDeltaUsage(output_tokens=400,
                          output_tokens_details=OutputTokensDetails(thinking_tokens=350)),
        OurUsage(input_tokens=50, output_tokens=400, reasoning_tokens=350)),
}


@reads
@pytest.mark.parametrize("shape", list(USAGE_SHAPES))
async def test_every_usage_shape_reads_as_the_sdk_reads_it(read_size, shape):
    first, last, expected = USAGE_SHAPES[shape]
    events = [start(first), *text(0, "ok"), *finish("end_turn", last)]

    ours, sdk = await both(events, read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.usage == expected


@reads
async def test_a_refusal_keeps_its_text_and_is_flagged(read_size):
    ours, sdk = await both(REFUSAL, read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.text == "I can help with part of that, but"
    assert ours.response.outcome is Outcome.REFUSAL


@reads
async def test_max_tokens_in_text_keeps_the_text_and_says_it_was_cut(read_size):
    ours, sdk = await both(MAX_TOKENS_IN_TEXT, read_size)

    assert_reads_as_the_sdk(ours, sdk)
    assert ours.response.outcome is Outcome.LENGTH
    assert ours.response.text == "The answer is a long"


@reads
async def test_max_tokens_inside_a_tool_call_keeps_the_call_but_never_runs_it(read_size):
    ours, sdk = await both(MAX_TOKENS_IN_CALL, read_size)

    assert_reads_as_the_sdk(ours, sdk)
    (call,) = ours.response.tool_calls
    assert call.input == {} and "output token limit" in call.arguments_error
    assert '{"expression": "2' in call.arguments_error
    assert ours.response.text == "Writing it."


# -- streams that did not finish ---------------------------------------------------------------
def error_event() -> bytes:
    error = ErrorResponse(type="error", error=OverloadedErrorObject(type="overloaded_error",
                                                                    message="Overloaded"))
    return f"event: error\ndata: {error.model_dump_json(exclude_unset=True)}\n\n".encode()


@reads
async def test_an_error_event_mid_stream_fails_retryably_with_the_partial_text(read_size):
    ours, sdk = await both([start(), *text(0, "Hello", " wör")[:-1]], read_size,
                           raw=error_event())

    assert sdk.error is not None
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.kind is ErrorKind.SERVER and ours.error.status == 529
    assert ours.error.partial_text == "Hello wör"


@reads
async def test_a_stream_cut_off_mid_text_is_a_retryable_cut_off(read_size):
    ours, sdk = await both(TEXT, read_size, cut_at=" ✓".encode())

    assert sdk.stop_reason is None
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.kind is ErrorKind.MALFORMED and "cut off" in ours.error.message
    assert ours.error.partial_text == "Hello wörld"


@reads
async def test_a_stream_cut_off_mid_tool_call_is_a_retryable_cut_off(read_size):
    ours, sdk = await both(INTERLEAVED, read_size, cut_at=b'"{}"')

    assert sdk.stop_reason is None
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.partial_text == "First.\n\nSecond."


@reads
async def test_a_connection_broken_mid_answer_is_a_retryable_network_error(read_size):
    ours, sdk = await both([start(), *text(0, "Hello", " wörld")[:-1]], read_size, broken=True)

    assert sdk.error is not None
    assert_reads_as_the_sdk(ours, sdk)
    assert ours.error.kind is ErrorKind.NETWORK and ours.error.partial_text == "Hello wörld"


# -- whole messages --------------------------------------------------------------------------------
MESSAGES = {
    "text": ([TextBlock(type="text", text="Hello wörld ✓")], "end_turn", Outcome.COMPLETE),
    "thinking, text and tool calls": ([
        ThinkingBlock(type="thinking", thinking="Add both.", signature="EqQBCkYI=="),
        TextBlock(type="text", text="First."),
        ToolUseBlock(type="tool_use", id="toolu_a", name="calculator",
                     input={"expression": "2+2"}),
        TextBlock(type="text", text="Second."),
        ToolUseBlock(type="tool_use", id="toolu_b", name="calculator",
                     input={"expression": "3+3"})], "tool_use", Outcome.TOOL_USE),
    "refusal": ([TextBlock(type="text", text="I can't help with that.")], "refusal",
                Outcome.REFUSAL),
    "max_tokens": ([TextBlock(type="text", text="The answer is a long")], "max_tokens",
                   Outcome.LENGTH),
}


@reads
@pytest.mark.parametrize("case", list(MESSAGES))
async def test_a_whole_message_reads_as_the_sdk_reads_it(read_size, case):
    content, stop_reason, outcome = MESSAGES[case]
    usage = Usage(input_tokens=50, output_tokens=400, cache_creation_input_tokens=1000,
                  cache_read_input_tokens=3000,
                  output_tokens_details=OutputTokensDetails(thinking_tokens=120))
    body = Message(id="msg_wire", type="message", role="assistant", model=MODEL, content=content,
                   stop_reason=stop_reason, stop_sequence=None,
                   usage=usage).model_dump_json(exclude_unset=True).encode()
    fake = server(body, read_size, content_type="application/json")
    provider = AnthropicProvider("sk-ant-fixture", http_client=fake.client())

    response = await provider.chat(ChatRequest(model="claude-sonnet-4-5", messages=[]))
    sdk = await anthropic_sdk_create(body)

    assert our_blocks(response.message) == sdk_blocks(sdk)
    assert response.text == TEXT_RUN_SEPARATOR.join(sdk.texts)
    assert response.outcome is outcome
    assert response.usage == OurUsage.from_anthropic(sdk.usage) == OurUsage(
        input_tokens=50, output_tokens=400, cache_write_tokens=1000, cache_read_tokens=3000,
        reasoning_tokens=120)
