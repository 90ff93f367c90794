from __future__ import annotations

import asyncio

import httpx
import pytest

from agents.runtime.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agents.runtime.pricing import Usage
from agents.runtime.providers.anthropic import (
    AnthropicProvider,
    messages_to_anthropic,
    system_to_anthropic,
)
from agents.runtime.providers.base import (
    ChatRequest,
    ErrorKind,
    Outcome,
    ProviderError,
    StreamDone,
    StreamText,
    StreamThinking,
    SystemBlock,
)
from agents.runtime.tools import ToolSpec

from .fakes import FakeEndlessStream, FakeLLMServer, json_response, sse, sse_response

KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"
CALC = ToolSpec("calculator", "Evaluate arithmetic.",
                {"type": "object", "properties": {"expression": {"type": "string"}}})


def provider(server: FakeLLMServer, **kwargs) -> AnthropicProvider:
    return AnthropicProvider(KEY, http_client=server.client(), **kwargs)


def request(text: str = "hi", **kwargs) -> ChatRequest:
    return ChatRequest(model="claude-sonnet-4-5", messages=[Message.user(text)], **kwargs)


def message_body(content: list, *, stop: str = "end_turn", usage: dict | None = None) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": usage or {"input_tokens": 10, "output_tokens": 5}}


async def collect(p: AnthropicProvider, req: ChatRequest) -> list:
    return [event async for event in p.stream(req)]


# -- the request --------------------------------------------------------------------------------
async def test_it_sends_a_messages_api_request():
    server = FakeLLMServer(json_response(200, message_body([{"type": "text", "text": "ok"}])))
    req = request(system=[SystemBlock("You are helpful.", cacheable=True),
                          SystemBlock("Today is Monday.")], tools=[CALC], temperature=0.5)

    await provider(server).chat(req)

    sent = server.requests[0]
    assert str(sent.url) == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    body = server.bodies[0]
    assert body["max_tokens"] == 4096
    assert body["system"] == [
        {"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Today is Monday."},
    ]
    assert body["tools"] == [{"name": "calculator", "description": "Evaluate arithmetic.",
                              "input_schema": CALC.parameters}]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert body["temperature"] == 0.5


def test_one_cache_marker_closes_each_run_of_cacheable_blocks():
    blocks = system_to_anthropic(
        [SystemBlock("a", cacheable=True), SystemBlock("b", cacheable=True), SystemBlock("now"),
         SystemBlock("c", cacheable=True)], [], caching=True)

    assert ["cache_control" in b for b in blocks] == [False, True, False, True]


async def test_without_prompt_caching_no_cache_marker_is_sent():
    server = FakeLLMServer(json_response(200, message_body([{"type": "text", "text": "ok"}])))
    p = provider(server, capabilities={"prompt_caching": False})

    await p.chat(request(system=[SystemBlock("static", cacheable=True)]))

    assert server.bodies[0]["system"] == [{"type": "text", "text": "static"}]


def test_history_converts_tool_use_results_and_signed_thinking():
    history = [
        Message.user("2+2 and 3+3?"),
        Message.assistant(blocks=[
            ThinkingBlock("two sums", signature="sig-1"),
            ThinkingBlock("from another provider"),
            TextBlock("Let me calculate."),
            ToolUseBlock("toolu_1", "calculator", {"expression": "2+2"}),
            ToolUseBlock("toolu_2", "calculator", {"expression": "3+3"}),
        ]),
        Message.tool_results([ToolResultBlock("toolu_1", "4", name="calculator")]),
        Message.tool_results([ToolResultBlock("toolu_2", "boom", is_error=True)]),
        Message.assistant("4 and the second failed."),
    ]

    assert messages_to_anthropic(history) == [
        {"role": "user", "content": [{"type": "text", "text": "2+2 and 3+3?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "two sums", "signature": "sig-1"},
            {"type": "text", "text": "Let me calculate."},
            {"type": "tool_use", "id": "toolu_1", "name": "calculator",
             "input": {"expression": "2+2"}},
            {"type": "tool_use", "id": "toolu_2", "name": "calculator",
             "input": {"expression": "3+3"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "4"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom",
             "is_error": True},
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "4 and the second failed."}]},
    ]


def test_a_user_message_after_tool_results_merges_behind_them():
    history = [
        Message.assistant(blocks=[ToolUseBlock("t1", "calculator", {})]),
        Message.user("also, hurry"),
        Message.tool_results([ToolResultBlock("t1", "4")]),
    ]

    wire = messages_to_anthropic(history)

    assert [b["type"] for b in wire[1]["content"]] == ["tool_result", "text"]


def test_system_role_history_goes_into_the_system_blocks_and_empty_text_is_dropped():
    history = [Message.system("earlier summary"), Message.user("go"), Message.assistant("  ")]

    assert system_to_anthropic([], history, caching=True) == [
        {"type": "text", "text": "earlier summary"}]
    assert messages_to_anthropic(history) == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]}]


# -- responses ------------------------------------------------------------------------------------
async def test_chat_parses_text_thinking_and_tool_use_with_cache_usage():
    content = [
        {"type": "thinking", "thinking": "I should add.", "signature": "EqQBCkYIAhgC"},
        {"type": "text", "text": "Adding now."},
        {"type": "tool_use", "id": "toolu_01", "name": "calculator",
         "input": {"expression": "2+2"}},
    ]
    usage = {"input_tokens": 50, "cache_creation_input_tokens": 1000,
             "cache_read_input_tokens": 3000, "output_tokens": 80}
    server = FakeLLMServer(json_response(200, message_body(content, stop="tool_use", usage=usage)))

    response = await provider(server).chat(request(tools=[CALC]))

    thinking, text, call = response.message.blocks
    assert thinking == ThinkingBlock("I should add.", "EqQBCkYIAhgC")
    assert text.text == "Adding now."
    assert (call.id, call.name, call.input) == ("toolu_01", "calculator", {"expression": "2+2"})
    assert response.usage == Usage(input_tokens=50, output_tokens=80, cache_write_tokens=1000,
                                   cache_read_tokens=3000)
    assert response.stop_reason == "tool_use"
    assert response.provider == "anthropic"


STREAM_EVENTS = [
    {"type": "message_start", "message": {
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [], "stop_reason": None,
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 5,
                  "cache_read_input_tokens": 100, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0,
     "content_block": {"type": "thinking", "thinking": ""}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "thinking_delta", "thinking": "Two plus "}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "thinking_delta", "thinking": "two."}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "signature_delta", "signature": "sig-xyz"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "ping"},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let "}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "me."}},
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2, "content_block": {
        "type": "tool_use", "id": "toolu_9", "name": "calculator", "input": {}}},
    {"type": "content_block_delta", "index": 2,
     "delta": {"type": "input_json_delta", "partial_json": ""}},
    {"type": "content_block_delta", "index": 2,
     "delta": {"type": "input_json_delta", "partial_json": '{"expres'}},
    {"type": "content_block_delta", "index": 2,
     "delta": {"type": "input_json_delta", "partial_json": 'sion": "2+2"}'}},
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 42}},
    {"type": "message_stop"},
]


async def test_stream_reassembles_thinking_text_and_tool_use_and_combines_usage():
    server = FakeLLMServer(sse_response(sse(*STREAM_EVENTS, done=False, event_names=True),
                                        chunk=11))

    events = await collect(provider(server), request(tools=[CALC]))

    assert [e.text for e in events if isinstance(e, StreamThinking)] == ["Two plus ", "two."]
    assert [e.text for e in events if isinstance(e, StreamText)] == ["Let ", "me."]
    done = events[-1]
    assert isinstance(done, StreamDone)
    thinking, text, call = done.response.message.blocks
    assert thinking == ThinkingBlock("Two plus two.", "sig-xyz")
    assert text.text == "Let me."
    assert (call.id, call.name, call.input) == ("toolu_9", "calculator", {"expression": "2+2"})
    # message_start gave input and cache counts, message_delta the output count: no double count
    assert done.response.usage == Usage(input_tokens=10, output_tokens=42, cache_write_tokens=5,
                                        cache_read_tokens=100)
    assert done.response.stop_reason == "tool_use"
    assert server.bodies[0]["stream"] is True


async def test_cumulative_usage_in_message_delta_replaces_rather_than_adds():
    events = [dict(e) for e in STREAM_EVENTS]
    events[-2] = {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                  "usage": {"input_tokens": 10, "cache_creation_input_tokens": 5,
                            "cache_read_input_tokens": 100, "output_tokens": 42}}
    server = FakeLLMServer(sse_response(sse(*events, done=False)))

    done = (await collect(provider(server), request()))[-1]

    assert done.response.usage == Usage(input_tokens=10, output_tokens=42, cache_write_tokens=5,
                                        cache_read_tokens=100)


async def test_a_stream_error_event_raises_a_retryable_overloaded_error():
    body = sse(STREAM_EVENTS[0],
               {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
               done=False, event_names=True)
    server = FakeLLMServer(sse_response(body))

    with pytest.raises(ProviderError) as caught:
        await collect(provider(server), request())

    assert caught.value.retryable and caught.value.status == 529
    assert "Overloaded" in caught.value.message


async def test_a_stream_that_ends_without_a_stop_is_malformed():
    server = FakeLLMServer(sse_response(sse(STREAM_EVENTS[0], "junk", done=False)))

    with pytest.raises(ProviderError) as caught:
        await collect(provider(server), request())

    assert caught.value.kind == ErrorKind.MALFORMED and caught.value.retryable


def _tool_stream(partial_json: str, stop: str) -> list[dict]:
    return [
        STREAM_EVENTS[0],
        {"type": "content_block_start", "index": 0, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": partial_json}},
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]


async def test_malformed_tool_input_json_keeps_the_call_with_an_error():
    server = FakeLLMServer(sse_response(sse(*_tool_stream('{"expression": 2+', "tool_use"),
                                            done=False)))

    (call,) = (await collect(provider(server), request()))[-1].response.tool_calls

    assert call.input == {} and "not valid JSON" in call.arguments_error


async def test_a_tool_call_cut_by_max_tokens_is_kept_but_not_runnable():
    server = FakeLLMServer(sse_response(sse(*_tool_stream('{"expression": ', "max_tokens"),
                                            done=False)))

    response = (await collect(provider(server), request()))[-1].response

    (call,) = response.tool_calls
    assert call.input == {} and "output token limit" in call.arguments_error
    assert '{"expression": ' in call.arguments_error
    assert response.outcome == Outcome.LENGTH


# -- errors -----------------------------------------------------------------------------------------
def anthropic_error(status: int, kind: str, message: str, **headers: str) -> httpx.Response:
    return json_response(status, {"type": "error", "error": {"type": kind, "message": message}},
                         headers=headers)


async def error_for(response: httpx.Response) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider(FakeLLMServer(response)).chat(request())
    return caught.value


async def test_401_is_an_auth_error_without_the_key():
    error = await error_for(anthropic_error(401, "authentication_error",
                                            f"invalid x-api-key {KEY}"))

    assert error.kind == ErrorKind.AUTH and not error.retryable
    assert "The API key was rejected (401)" in error.message
    assert KEY not in error.message and KEY not in repr(error)


async def test_prompt_too_long_is_a_context_overflow():
    error = await error_for(anthropic_error(400, "invalid_request_error",
                                            "prompt is too long: 210000 tokens > 200000 maximum"))

    assert error.kind == ErrorKind.CONTEXT_OVERFLOW and not error.retryable


async def test_529_overloaded_is_retryable():
    error = await error_for(anthropic_error(529, "overloaded_error", "Overloaded"))

    assert error.kind == ErrorKind.SERVER and error.retryable


async def test_429_carries_retry_after():
    error = await error_for(anthropic_error(429, "rate_limit_error", "Number of requests has "
                                            "exceeded your rate limit", **{"retry-after": "7"}))

    assert error.kind == ErrorKind.RATE_LIMIT and error.retryable and error.retry_after == 7.0


async def test_404_unknown_model():
    error = await error_for(anthropic_error(404, "not_found_error", "model: claude-9"))

    assert error.kind == ErrorKind.MODEL_NOT_FOUND and not error.retryable


def test_repr_hides_the_key():
    assert KEY not in repr(AnthropicProvider(KEY))


def test_capabilities():
    caps = AnthropicProvider(KEY).capabilities_for("claude-haiku-4-5")

    assert caps.native_tool_calling and caps.vision and caps.prompt_caching and caps.streaming


async def test_cancelling_an_anthropic_stream_closes_it():
    stream = FakeEndlessStream(
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": {"type": "text_delta", "text": "Hi"}}\n\n')
    server = FakeLLMServer(httpx.Response(200, stream=stream))
    p = provider(server)
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in p.stream(request()):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    # The stream never ends on its own: the consumer ended because the cancel reached it.
    assert stream.closed.is_set()


async def test_a_delta_for_another_kind_of_block_is_ignored():
    events = [
        STREAM_EVENTS[0],
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "not text"}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 2}},
        {"type": "message_stop"},
    ]
    server = FakeLLMServer(sse_response(sse(*events, done=False)))

    events_out = await collect(provider(server), request())

    assert events_out[-1].response.message.blocks == [TextBlock("Hi")]
    assert not [e for e in events_out if isinstance(e, StreamThinking)]
