from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from agents.runtime.messages import (
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agents.runtime.pricing import Usage
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
from agents.runtime.providers.openai import (
    OpenAIProvider,
    messages_to_openai,
    tools_to_openai_format,
)
from agents.runtime.providers.reliable import CoolDowns, ReliableProvider
from agents.runtime.tools import ToolSpec

from .fakes import FakeEndlessStream, FakeLLMServer, json_response, sse, sse_response

KEY = "sk-test-abcdefghijklmnopqrstuvwxyz0123456789"
CALC = ToolSpec("calculator", "Evaluate arithmetic.",
                {"type": "object", "properties": {"expression": {"type": "string"}},
                 "required": ["expression"]})
TIME = ToolSpec("current_time", "The current time.", {"type": "object", "properties": {}})


def provider(server: FakeLLMServer, **kwargs) -> OpenAIProvider:
    kwargs.setdefault("api_key", KEY)
    return OpenAIProvider("https://api.openai.com/v1", http_client=server.client(), **kwargs)


def request(text: str = "hi", **kwargs) -> ChatRequest:
    return ChatRequest(model="gpt-4o-mini", messages=[Message.user(text)], **kwargs)


def completion(message: dict, *, finish: str = "stop", usage: dict | None = None) -> dict:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini-2024",
        "choices": [{"index": 0, "message": {"role": "assistant", **message},
                     "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


def chunk(delta: dict, *, finish: str | None = None) -> dict:
    return {"id": "chatcmpl-2", "object": "chat.completion.chunk", "model": "gpt-4o-mini-2024",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def collect(provider_: OpenAIProvider, req: ChatRequest) -> list:
    return [event async for event in provider_.stream(req)]


# -- the request ----------------------------------------------------------------------------------
async def test_it_sends_the_request_in_chat_completions_shape():
    server = FakeLLMServer(json_response(200, completion({"content": "Hello"})))
    p = provider(server)
    req = ChatRequest(
        model="gpt-4o-mini",
        system=[SystemBlock("You are helpful.", cacheable=True), SystemBlock("Today is Monday.")],
        messages=[Message.user("hi")], tools=[CALC], temperature=0.2, max_tokens=100)

    await p.chat(req)

    sent = server.requests[0]
    assert str(sent.url) == "https://api.openai.com/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = server.bodies[0]
    assert body["messages"] == [
        {"role": "system", "content": "You are helpful.\n\nToday is Monday."},
        {"role": "user", "content": "hi"},
    ]
    assert body["tools"] == [{"type": "function", "function": {
        "name": "calculator", "description": "Evaluate arithmetic.",
        "parameters": CALC.parameters}}]
    assert body["temperature"] == 0.2
    assert body["max_completion_tokens"] == 100
    assert "stream" not in body


def test_tools_to_openai_format_wraps_each_spec_as_a_function():
    assert tools_to_openai_format([TIME]) == [{"type": "function", "function": {
        "name": "current_time", "description": "The current time.",
        "parameters": {"type": "object", "properties": {}}}}]


def test_history_converts_tool_calls_results_and_drops_thinking():
    history = [
        Message.user("what is 2+2 and the time?"),
        Message.assistant(blocks=[
            ThinkingBlock("let me use tools", signature="sig"),
            TextBlock("Checking."),
            ToolUseBlock("call_1", "calculator", {"expression": "2+2"}),
            ToolUseBlock("call_2", "current_time", {}),
        ]),
        Message.tool_results([
            ToolResultBlock("call_1", "4", name="calculator"),
            ToolResultBlock("call_2", "clock unavailable", is_error=True, name="current_time"),
        ]),
        Message.assistant("4, and I could not read the clock."),
    ]

    wire = messages_to_openai([SystemBlock("sys")], history)

    assert wire == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "what is 2+2 and the time?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'}},
            {"id": "call_2", "type": "function",
             "function": {"name": "current_time", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: clock unavailable"},
        {"role": "assistant", "content": "4, and I could not read the clock."},
    ]


def test_an_assistant_message_with_only_tool_calls_has_empty_string_content():
    # llama-cpp-python's server answers "content": null with a 500; "" is accepted everywhere.
    wire = messages_to_openai([], [Message.assistant(blocks=[
        ThinkingBlock("plan"), ToolUseBlock("c", "t", {})])])
    assert wire == [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}]


def test_an_assistant_message_without_tool_calls_sends_no_tool_calls_key():
    wire = messages_to_openai([], [Message.assistant(blocks=[ThinkingBlock("only thinking")])])
    assert wire == [{"role": "assistant", "content": ""}]


def test_system_role_history_messages_join_the_one_system_message():
    wire = messages_to_openai([SystemBlock("base")],
                              [Message.system("summary of earlier turns"), Message.user("go")])
    assert wire[0] == {"role": "system", "content": "base\n\nsummary of earlier turns"}
    assert [m["role"] for m in wire] == ["system", "user"]


async def test_a_local_server_needs_no_key_and_gets_max_tokens():
    server = FakeLLMServer(json_response(200, completion({"content": "ok"})))
    p = OpenAIProvider("http://localhost:11434/v1/", http_client=server.client())

    await p.chat(request(max_tokens=50))

    assert "authorization" not in server.requests[0].headers
    assert str(server.requests[0].url) == "http://localhost:11434/v1/chat/completions"
    assert server.bodies[0]["max_tokens"] == 50


async def test_without_native_tools_the_specs_go_into_the_system_prompt():
    server = FakeLLMServer(json_response(200, completion({"content": "ok"})))
    p = OpenAIProvider("http://localhost:8080/v1", http_client=server.client(),
                       capabilities={"native_tool_calling": False})

    await p.chat(request(tools=[CALC], system=[SystemBlock("sys")]))

    body = server.bodies[0]
    assert "tools" not in body
    system = body["messages"][0]["content"]
    assert system.startswith("sys\n\n## Tool Use Protocol")
    assert "**calculator**: Evaluate arithmetic." in system


# -- non-streaming responses ----------------------------------------------------------------------
async def test_chat_returns_text_and_normalised_usage_with_cached_and_reasoning_tokens():
    usage = {"prompt_tokens": 2000, "completion_tokens": 300, "total_tokens": 2300,
             "prompt_tokens_details": {"cached_tokens": 1536},
             "completion_tokens_details": {"reasoning_tokens": 200}}
    server = FakeLLMServer(json_response(200, completion({"content": "Hello!"}, usage=usage)))

    response = await provider(server).chat(request())

    assert response.text == "Hello!"
    assert response.usage == Usage(input_tokens=464, output_tokens=300, cache_read_tokens=1536,
                                   reasoning_tokens=200)
    assert response.message.usage == response.usage
    assert response.stop_reason == "stop"
    assert response.model == "gpt-4o-mini-2024"
    assert response.provider == "openai"


async def test_chat_parses_parallel_tool_calls():
    message = {"content": None, "tool_calls": [
        {"id": "call_a", "type": "function",
         "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'}},
        {"id": "call_b", "type": "function",
         "function": {"name": "current_time", "arguments": "{}"}},
    ]}
    server = FakeLLMServer(json_response(200, completion(message, finish="tool_calls")))

    response = await provider(server).chat(request(tools=[CALC, TIME]))

    assert response.text == ""
    assert [(c.id, c.name, c.input) for c in response.tool_calls] == [
        ("call_a", "calculator", {"expression": "2+2"}), ("call_b", "current_time", {})]
    assert all(c.arguments_error is None for c in response.tool_calls)
    assert response.stop_reason == "tool_calls"


async def test_malformed_tool_arguments_keep_the_call_with_the_raw_text_as_its_error():
    message = {"content": "", "tool_calls": [
        {"id": "call_x", "type": "function",
         "function": {"name": "calculator", "arguments": '{"expression": "2+'}}]}
    server = FakeLLMServer(json_response(200, completion(message, finish="tool_calls")))

    response = await provider(server).chat(request(tools=[CALC]))

    (call,) = response.tool_calls
    assert call.name == "calculator" and call.input == {}
    assert "not valid JSON" in call.arguments_error
    assert '{"expression": "2+' in call.arguments_error


async def test_reasoning_content_becomes_a_thinking_block():
    server = FakeLLMServer(json_response(200, completion(
        {"content": "42", "reasoning_content": "6 times 7"})))

    response = await provider(server).chat(request())

    assert isinstance(response.message.blocks[0], ThinkingBlock)
    assert response.message.blocks[0].thinking == "6 times 7"
    assert response.text == "42"


async def test_a_missing_tool_call_id_gets_a_fresh_one():
    message = {"content": None, "tool_calls": [
        {"type": "function", "function": {"name": "current_time", "arguments": {}}}]}
    server = FakeLLMServer(json_response(200, completion(message)))

    (call,) = (await provider(server).chat(request())).tool_calls

    assert call.id.startswith("call_") and call.input == {}


async def test_a_body_without_choices_is_a_retryable_malformed_response():
    server = FakeLLMServer(json_response(200, {"object": "chat.completion"}))

    with pytest.raises(ProviderError) as caught:
        await provider(server).chat(request())

    assert caught.value.kind == ErrorKind.MALFORMED and caught.value.retryable


async def test_an_error_object_in_a_200_body_is_an_error():
    server = FakeLLMServer(json_response(200, {"error": {"message": "upstream overloaded",
                                                         "code": 502}}))

    with pytest.raises(ProviderError) as caught:
        await provider(server).chat(request())

    assert caught.value.status == 502 and caught.value.retryable
    assert "upstream overloaded" in caught.value.message


# -- streaming -------------------------------------------------------------------------------------
async def test_stream_yields_text_deltas_and_a_final_response_with_usage():
    body = sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}), chunk({"content": "lo"}), chunk({"content": " there"}),
        chunk({}, finish="stop"),
        {"id": "chatcmpl-2", "object": "chat.completion.chunk", "choices": [],
         "usage": {"prompt_tokens": 20, "completion_tokens": 3,
                   "prompt_tokens_details": {"cached_tokens": 8}}},
    )
    server = FakeLLMServer(sse_response(body, chunk=5))

    events = await collect(provider(server), request())

    assert [e.text for e in events if isinstance(e, StreamText)] == ["Hel", "lo", " there"]
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert done.response.text == "Hello there"
    assert done.response.usage == Usage(input_tokens=12, output_tokens=3, cache_read_tokens=8)
    assert done.response.stop_reason == "stop"
    body_sent = server.bodies[0]
    assert body_sent["stream"] is True
    assert body_sent["stream_options"] == {"include_usage": True}


async def test_stream_assembles_parallel_tool_calls_split_over_many_chunks():
    body = sse(
        chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function",
             "function": {"name": "calcu", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "lator"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"expr'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "current_time", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ession": "12*'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"timezone": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '7"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '"UTC"}'}}]}),
        chunk({}, finish="tool_calls"),
    )
    server = FakeLLMServer(sse_response(body, chunk=3))

    events = await collect(provider(server), request(tools=[CALC, TIME]))

    assert not [e for e in events if isinstance(e, StreamText)]
    response = events[-1].response
    assert [(c.id, c.name, c.input) for c in response.tool_calls] == [
        ("call_a", "calculator", {"expression": "12*7"}),
        ("call_b", "current_time", {"timezone": "UTC"}),
    ]
    assert response.stop_reason == "tool_calls"


async def test_stream_tool_calls_without_index_are_told_apart_by_id():
    body = sse(
        chunk({"tool_calls": [{"id": "a", "function": {"name": "calculator",
                                                       "arguments": '{"expression": "1+1"}'}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "current_time",
                                                       "arguments": "{}"}}]}),
        chunk({}, finish="tool_calls"),
    )
    server = FakeLLMServer(sse_response(body))

    response = (await collect(provider(server), request()))[-1].response

    assert [(c.id, c.name) for c in response.tool_calls] == [("a", "calculator"),
                                                             ("b", "current_time")]


async def test_stream_reasoning_deltas_become_thinking_events():
    body = sse(chunk({"reasoning_content": "Let me "}), chunk({"reasoning": "think."}),
               chunk({"content": "Done."}, finish="stop"))
    server = FakeLLMServer(sse_response(body))

    events = await collect(provider(server), request())

    assert [e.text for e in events if isinstance(e, StreamThinking)] == ["Let me ", "think."]
    blocks = events[-1].response.message.blocks
    assert isinstance(blocks[0], ThinkingBlock) and blocks[0].thinking == "Let me think."
    assert events[-1].response.text == "Done."


async def test_stream_skips_junk_lines():
    body = sse(": keep-alive comment", "data: not json at all", "garbage line",
               "data: [1, 2, 3]", chunk({"content": "ok"}), "event: whatever",
               chunk({}, finish="stop"))
    server = FakeLLMServer(sse_response(body))

    events = await collect(provider(server), request())

    assert events[-1].response.text == "ok"


async def test_a_stream_with_no_content_and_no_finish_is_a_retryable_malformed_error():
    server = FakeLLMServer(sse_response(sse("data: {oops", chunk({"role": "assistant"}),
                                            done=False)))

    with pytest.raises(ProviderError) as caught:
        await collect(provider(server), request())

    assert caught.value.kind == ErrorKind.MALFORMED and caught.value.retryable


async def test_an_error_chunk_in_the_stream_raises():
    body = sse({"error": {"message": "Rate limit reached", "code": 429}}, done=False)
    server = FakeLLMServer(sse_response(body))

    with pytest.raises(ProviderError) as caught:
        await collect(provider(server), request())

    assert caught.value.kind == ErrorKind.RATE_LIMIT and caught.value.retryable


async def test_a_stream_with_text_and_done_but_no_finish_reason_is_a_whole_answer():
    server = FakeLLMServer(sse_response(sse(chunk({"content": "Hi there"}))))

    response = (await collect(provider(server), request()))[-1].response

    assert response.text == "Hi there" and response.stop_reason is None


async def test_a_stream_with_text_but_no_finish_and_no_done_is_cut_off():
    server = FakeLLMServer(sse_response(sse(chunk({"content": "Half an ans"}), done=False)))

    with pytest.raises(ProviderError) as caught:
        await collect(provider(server), request())

    error = caught.value
    assert error.kind == ErrorKind.MALFORMED and error.retryable
    assert "cut off" in error.message and error.partial_text == "Half an ans"


async def test_a_refusal_in_a_whole_response_is_text_and_flagged():
    server = FakeLLMServer(json_response(200, completion(
        {"content": None, "refusal": "I can't help with that."})))

    response = await provider(server).chat(request())

    assert response.text == "I can't help with that."
    assert response.stop_reason == "refusal" and response.outcome == Outcome.REFUSAL


async def test_stream_usage_can_be_turned_off_for_servers_that_reject_it():
    server = FakeLLMServer(sse_response(sse(chunk({"content": "x"}, finish="stop"))))

    await collect(provider(server, stream_usage=False), request())

    assert "stream_options" not in server.bodies[0]


async def test_an_http_error_on_a_stream_is_a_provider_error():
    server = FakeLLMServer(json_response(503, {"error": {"message": "Service Unavailable"}},
                                         headers={"retry-after": "2"}))

    with pytest.raises(ProviderError) as caught:
        await collect(provider(server), request())

    assert caught.value.status == 503 and caught.value.retryable
    assert caught.value.retry_after == 2.0


# -- errors ------------------------------------------------------------------------------------------
async def error_for(response: httpx.Response | Exception) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider(FakeLLMServer(response)).chat(request())
    return caught.value


async def test_429_with_retry_after_seconds_is_a_retryable_rate_limit():
    error = await error_for(json_response(
        429, {"error": {"message": "Rate limit reached for gpt-4o-mini", "type": "requests"}},
        headers={"retry-after": "3"}))

    assert error.kind == ErrorKind.RATE_LIMIT and error.retryable
    assert error.status == 429 and error.retry_after == 3.0
    assert "Rate limit reached for gpt-4o-mini" in error.message


async def test_retry_after_as_an_http_date_is_read():
    error = await error_for(json_response(
        429, {"error": {"message": "slow down"}},
        headers={"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"}))

    assert error.retry_after is not None and error.retry_after > 1_000_000


async def test_retry_after_in_the_body_text_is_read():
    error = await error_for(json_response(
        429, {"error": {"message": "Too many requests, retry_after: 2.5 seconds"}}))

    assert error.retry_after == 2.5


async def test_429_for_an_exhausted_quota_is_not_retryable():
    error = await error_for(json_response(429, {"error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota", "code": "insufficient_quota"}}))

    assert error.kind == ErrorKind.RATE_LIMIT and not error.retryable


async def test_500_is_a_retryable_server_error():
    error = await error_for(json_response(500, {"error": {"message": "The server had an error"}}))

    assert error.kind == ErrorKind.SERVER and error.retryable and error.status == 500


async def test_a_500_that_is_really_a_validation_error_is_not_retried():
    # llama-cpp-python's server wraps a body its pydantic model refuses in a 500.
    detail = ("2 validation errors:\n  {'type': 'string_type', 'loc': ('body', 'messages', 2, "
              "'content'), 'msg': 'Input should be a valid string', 'input': None}")
    error = await error_for(json_response(500, {"error": {
        "message": detail, "type": "internal_server_error", "param": None, "code": None}}))

    assert error.kind == ErrorKind.BAD_REQUEST and not error.retryable and error.status == 500
    assert error.message.startswith("The provider could not accept the request (500)")


async def test_a_long_error_body_keeps_the_part_that_names_the_cause():
    cause = "'msg': 'Input should be a valid string', 'input': None"
    detail = "1 validation error: " + "{'loc': ('body', 'messages')} " * 60 + cause
    assert detail.index(cause) > 1000

    error = await error_for(json_response(500, {"error": {"message": detail}}))

    assert cause in error.detail and cause in error.message
    assert error.message.split(" Provider said: ")[0].count(".") <= 2  # a short headline
    assert error.detail == " ".join(detail.split())


async def test_an_error_body_longer_than_the_limit_is_shortened_on_the_error():
    error = await error_for(json_response(502, {"error": {"message": "x" * 10_000}}))

    assert 4000 <= len(error.detail) <= 4003 and error.detail.endswith("...")
    assert error.kind == ErrorKind.SERVER and error.retryable


async def test_401_is_a_permanent_auth_error_in_plain_words():
    error = await error_for(json_response(401, {"error": {
        "message": "Invalid authentication credentials", "code": "invalid_api_key"}}))

    assert error.kind == ErrorKind.AUTH and not error.retryable
    assert error.message.startswith("The API key was rejected (401). Check the provider's key")
    assert "Invalid authentication credentials" in error.message


async def test_404_unknown_model_is_permanent():
    error = await error_for(json_response(404, {"error": {
        "message": "The model `gpt-9` does not exist or you do not have access to it.",
        "code": "model_not_found"}}))

    assert error.kind == ErrorKind.MODEL_NOT_FOUND and not error.retryable
    assert "gpt-4o-mini" in error.message  # the model we asked for, named for the user


async def test_400_context_length_is_a_context_overflow():
    error = await error_for(json_response(400, {"error": {
        "message": "This model's maximum context length is 128000 tokens. However, your "
                   "messages resulted in 130000 tokens.", "code": "context_length_exceeded"}}))

    assert error.kind == ErrorKind.CONTEXT_OVERFLOW and not error.retryable


async def test_llamacpp_context_size_error_is_a_context_overflow():
    error = await error_for(json_response(400, {"error": {
        "code": 400, "type": "exceed_context_size_error",
        "message": "request (8968 tokens) exceeds the available context size (8448 tokens)"}}))

    assert error.kind == ErrorKind.CONTEXT_OVERFLOW


async def test_other_400_is_a_permanent_bad_request():
    error = await error_for(json_response(400, {"error": {"message": "Invalid 'messages'"}}))

    assert error.kind == ErrorKind.BAD_REQUEST and not error.retryable


async def test_a_call_to_a_tool_that_was_not_offered_is_retryable():
    error = await error_for(json_response(400, {"error": {
        "message": "tool call validation failed: attempted to call tool 'memory_recall' which "
                   "was not in request"}}))

    assert error.kind == ErrorKind.BAD_REQUEST and error.retryable


async def test_connection_error_is_retryable():
    error = await error_for(httpx.ConnectError("Connection refused"))

    assert error.kind == ErrorKind.NETWORK and error.retryable
    assert "https://api.openai.com" in error.message


async def test_timeout_is_retryable():
    error = await error_for(httpx.ReadTimeout("timed out"))

    assert error.kind == ErrorKind.TIMEOUT and error.retryable


async def test_the_api_key_never_appears_in_an_error_or_a_repr():
    p = provider(FakeLLMServer(json_response(401, {"error": {
        "message": f"Incorrect API key provided: {KEY}. You can find your API key at ..."}})))

    with pytest.raises(ProviderError) as caught:
        await p.chat(request())

    error = caught.value
    for text in (error.message, str(error), repr(error), repr(p)):
        assert KEY not in text
        assert KEY[:20] not in text
    assert "Incorrect API key provided" in error.message


async def test_a_key_echoed_in_a_network_error_is_redacted():
    error = await error_for(httpx.ConnectError(f"failed with header Bearer {KEY}"))

    assert KEY not in error.message


# -- capabilities ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("model", "vision"), [
    ("gpt-4o", True), ("gpt-4o-mini", True), ("gpt-4.1-nano", True), ("o3", True),
    ("o4-mini", True), ("o3-mini", False), ("gpt-3.5-turbo", False),
])
def test_openai_capabilities_per_model(model, vision):
    caps = OpenAIProvider(api_key="k").capabilities_for(model)

    assert caps.vision is vision
    assert caps.native_tool_calling and caps.streaming and caps.prompt_caching


def test_local_servers_default_to_native_tools_without_caching():
    p = OpenAIProvider("http://localhost:8000/v1")

    assert p.capabilities.native_tool_calling and p.capabilities.streaming
    assert not p.capabilities.prompt_caching
    assert p.capabilities_for("llava:13b").vision
    assert not p.capabilities_for("qwen2.5:7b").vision


def test_configured_capabilities_win():
    p = OpenAIProvider("http://localhost:8000/v1",
                       capabilities={"native_tool_calling": False, "vision": True})

    assert not p.capabilities_for("qwen2.5:7b").native_tool_calling
    assert p.capabilities_for("qwen2.5:7b").vision


# -- cancellation ----------------------------------------------------------------------------------
def endless_server() -> tuple[FakeLLMServer, FakeEndlessStream]:
    stream = FakeEndlessStream(b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n')
    response = httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})
    return FakeLLMServer(response), stream


async def test_cancelling_the_consumer_closes_the_stream_promptly():
    server, stream = endless_server()
    p = provider(server)
    first = asyncio.Event()

    async def consume() -> None:
        async for event in p.stream(request()):
            if isinstance(event, StreamText):
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The stream never ends on its own: the consumer ended because the cancel reached it.
    assert stream.closed.is_set()


async def test_abandoning_the_generator_closes_the_stream():
    server, stream = endless_server()
    events = provider(server).stream(request())

    assert isinstance(await events.__anext__(), StreamText)
    await asyncio.wait_for(events.aclose(), 0.1)

    assert stream.closed.is_set()


async def test_aclose_closes_only_a_client_it_created():
    server = FakeLLMServer(json_response(200, completion({"content": "x"})))
    client = server.client()
    p = OpenAIProvider(api_key=KEY, http_client=client)

    await p.aclose()

    assert not client.is_closed
    await client.aclose()


def test_payload_round_trips_through_json():
    p = OpenAIProvider(api_key=KEY)
    req = ChatRequest(model="gpt-4o", messages=[Message(Role.USER, [TextBlock("é")])],
                      tools=[CALC])
    assert json.loads(json.dumps(p.payload(req, stream=True)))["messages"][0]["content"] == "é"


# -- a stream that stalls ----------------------------------------------------------------------------
async def test_a_stream_that_stops_sending_is_a_retryable_stall():
    server, stream = endless_server()
    p = provider(server)
    p.stream_idle_s = 0.3
    with pytest.raises(ProviderError) as caught:
        # The stream never ends: without the idle limit this would wait forever (a failure here).
        await asyncio.wait_for(collect(p, request()), 30)
    error = caught.value
    assert error.retryable and error.kind == ErrorKind.TIMEOUT and "stalled" in error.message
    assert error.partial_text == "Hi"  # what came before the stall is kept for the record
    await asyncio.wait_for(stream.closed.wait(), 2)


async def test_a_stalled_stream_is_retried_then_failed_over():
    async def no_wait(seconds: float) -> None:
        pass

    stalling_server, _ = endless_server()
    stalling = provider(stalling_server, name="stalling")
    stalling.stream_idle_s = 0.1
    fallback = provider(FakeLLMServer(sse_response(sse(chunk({"content": "From the fallback"},
                                                             finish="stop")))), name="fallback")
    wrapper = ReliableProvider([stalling, fallback], sleep=no_wait, cool_downs=CoolDowns())
    events = [e async for e in wrapper.stream(request())]
    response = events[-1].response
    assert response.text == "From the fallback" and response.provider == "fallback"
    assert len(stalling_server.requests) == 3  # the stall was retried before the failover


async def test_an_empty_stream_is_asked_again_unstreamed_to_get_the_servers_own_error():
    # llama-cpp-python's server answers a prompt over its window with an empty 200 stream.
    overflow = {"error": {"message": "This model's maximum context length is 8192 tokens. "
                                     "However, you requested 10047 tokens.",
                          "type": "invalid_request_error", "code": "context_length_exceeded"}}
    server = FakeLLMServer(sse_response(b""), json_response(400, overflow))
    with pytest.raises(ProviderError) as caught:
        await collect(provider(server), request())
    assert caught.value.kind == ErrorKind.CONTEXT_OVERFLOW
    assert [b.get("stream", False) for b in server.bodies] == [True, False]


async def test_an_empty_stream_whose_unstreamed_request_answers_is_that_answer():
    server = FakeLLMServer(sse_response(b""), json_response(200, completion({"content": "Hi."})))
    events = await collect(provider(server), request())
    assert events[-1].response.text == "Hi." and len(server.requests) == 2
