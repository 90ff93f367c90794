from __future__ import annotations

import json
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.runtime.messages import (
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agents.runtime.providers.base import (
    ChatRequest,
    ChatResponse,
    StreamDone,
    StreamText,
    SystemBlock,
)
from agents.runtime.providers.demo import DemoProvider
from agents.runtime.tools import ToolSpec

BUILTIN = ["calculator", "current_time", "memory_store", "memory_recall", "memory_forget",
           "http_fetch"]
TOOLS = [ToolSpec(name, f"The {name} tool.") for name in [*BUILTIN, "ping"]]
# The prompt-guided system text: tools listed as **name**, calls asked for in <tool_call> tags.
PROMPT_GUIDED_SYSTEM = (
    "You are an agent.\n\n## Tool Use Protocol\n\nTo use a tool, wrap a JSON object in "
    "<tool_call></tool_call> tags.\n\n### Available Tools\n\n"
    + "".join(f"**{name}**: The {name} tool.\nParameters: `{{}}`\n\n" for name in BUILTIN)
)


async def ask(history: list[Message], *, tools: list[ToolSpec] | None = TOOLS,
              system: str = "You are helpful.") -> ChatResponse:
    request = ChatRequest(model="demo-1", messages=history, tools=tools,
                          system=[SystemBlock(system)])
    return await DemoProvider().chat(request)


async def calls_for(text: str, **kwargs) -> list[tuple[str, dict]]:
    response = await ask([Message.user(text)], **kwargs)
    return [(c.name, c.input) for c in response.tool_calls]


# -- an MCP time server's tool -------------------------------------------------------------------
@pytest.mark.parametrize("builtin_too", [False, True], ids=["alone", "beside-current_time"])
async def test_a_time_question_goes_to_an_offered_mcp_time_server(builtin_too):
    tools = [ToolSpec("clock_get_current_time", "t"), ToolSpec("clock_convert_time", "c")]
    if builtin_too:
        tools.append(ToolSpec("current_time", "t"))
    assert await calls_for("What's the time in Tokyo?", tools=tools) == [
        ("clock_get_current_time", {"timezone": "Asia/Tokyo"})]
    # mcp-server-time requires a zone: the demo model names UTC when the person named none
    assert await calls_for("what time is it?", tools=tools) == [
        ("clock_get_current_time", {"timezone": "UTC"})]


async def test_it_reads_the_mcp_time_servers_json_answer():
    call = ToolUseBlock(id="call_1", name="clock_get_current_time", input={"timezone": "Asia/Tokyo"})
    output = json.dumps({"timezone": "Asia/Tokyo", "datetime": "2026-11-26T22:09:32+09:00",
                         "day_of_week": "Thursday", "is_dst": False})
    response = await ask([Message.user("What's the time in Tokyo?"),
                          Message(Role.ASSISTANT, [call]),
                          Message.tool_results([ToolResultBlock("call_1", output,
                                                                name="clock_get_current_time")])])
    assert response.text == "The current time in Asia/Tokyo is 2026-11-26T22:09:32+09:00."


# -- deciding on tool calls ----------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("What is 12 x 7?", [("calculator", {"expression": "12*7"})]),
    ("calculate (3 + 4) * 2", [("calculator", {"expression": "(3+4)*2"})]),
    ("what's 2^10", [("calculator", {"expression": "2**10"})]),
    ("what is 9 times 8", [("calculator", {"expression": "9*8"})]),
    ("what time is it?", [("current_time", {})]),
    ("What's the time in Tokyo?", [("current_time", {"timezone": "Asia/Tokyo"})]),
    ("current time in Europe/Paris please", [("current_time", {"timezone": "Europe/Paris"})]),
    ("Remember that my favourite colour is blue.",
     [("memory_store", {"content": "my favourite colour is blue", "key": "favourite_colour"})]),
    ("remember: the wifi password is hunter2",
     [("memory_store", {"content": "the wifi password is hunter2"})]),
    ("What is my favourite colour?", [("memory_recall", {"query": "favourite colour"})]),
    ("do you remember my name?", [("memory_recall", {"query": "name"})]),
    ("Forget my favourite colour.", [("memory_forget", {"key": "favourite_colour"})]),
    ("Please fetch https://example.com/page.", [("http_fetch", {"url": "https://example.com/page"})]),
])
async def test_it_calls_a_tool_for_a_recognisable_request(text, expected):
    assert await calls_for(text) == expected


@pytest.mark.parametrize("text", [
    "Tell me about cats.", "My number is 555-1234", "We met on 2024-01-05 at 10:30",
    "I have 3 times more work today",
])
async def test_it_calls_nothing_for_plain_conversation(text):
    assert await calls_for(text) == []


async def test_several_requests_in_one_message_give_parallel_calls_in_order():
    response = await ask([Message.user("what is 2+2 and what time is it")])

    assert [(c.name, c.input) for c in response.tool_calls] == [
        ("calculator", {"expression": "2+2"}), ("current_time", {})]
    assert len({c.id for c in response.tool_calls}) == 2
    assert response.stop_reason == "tool_use"
    assert response.text == ""


async def test_it_only_calls_offered_tools_and_says_so_otherwise():
    response = await ask([Message.user("what is 6*7")], tools=[ToolSpec("current_time", "t")])

    assert response.tool_calls == []
    assert "calculator" in response.text and "offline demo model" in response.text


async def test_call_ids_stay_unique_across_the_history():
    first = await ask([Message.user("what is 1+1")])
    history = [Message.user("what is 1+1"), first.message,
               Message.tool_results([ToolResultBlock(first.tool_calls[0].id, "2")]),
               Message.assistant("2"), Message.user("what is 2+2")]

    second = await ask(history)

    assert second.tool_calls[0].id != first.tool_calls[0].id


# -- answering from results ------------------------------------------------------------------------
async def answer_after(text: str, *outputs: str, is_error: bool = False) -> str:
    history = [Message.user(text)]
    response = await ask(history)
    history.append(response.message)
    history.append(Message.tool_results([
        ToolResultBlock(call.id, output, is_error=is_error, name=call.name)
        for call, output in zip(response.tool_calls, outputs, strict=True)]))
    final = await ask(history)
    assert final.tool_calls == []
    return final.text


@pytest.mark.parametrize(("text", "outputs", "answer"), [
    ("What is 12 x 7?", ["84"], "12 × 7 = 84."),
    ("what is (3+4)*2 - 1", ["13"], "(3 + 4) × 2 - 1 = 13."),
    ("what time is it in London?", ["2026-05-09T10:00:00+01:00"],
     "The current time in Europe/London is 2026-05-09T10:00:00+01:00."),
    ("Remember that my cat is called Tom", ["Stored."],
     "Got it, I'll remember that your cat is called Tom."),
    ("what is my cat called?", ["- my cat is called Tom"],
     "Here is what I remember about cat:\n- my cat is called Tom"),
    ("what is my shoe size?", ["No memories found."],
     "I don't have anything in memory about shoe size."),
    ("forget my cat", ["Forgot 1 memory."], "Done, I've forgotten cat."),
    ("fetch https://example.com", ["<html>Example Domain</html>"],
     "I fetched https://example.com. It begins:\n\n<html>Example Domain</html>"),
    ("what is 2+2 and what time is it", ["4", "10:00 UTC"],
     "2 + 2 = 4.\nThe current time is 10:00 UTC."),
])
async def test_it_answers_in_plain_words_from_the_results(text, outputs, answer):
    assert await answer_after(text, *outputs) == answer


async def test_a_hooks_feedback_on_a_result_is_not_quoted_back():
    """The feedback a hook added to a call that worked is the model's to act on; the demo
    model answers from what the tool said."""
    output = "84\n\nHook feedback:\naudited by the compliance hook (ticket 42)"
    assert await answer_after("What is 12 x 7?", output) == "12 × 7 = 84."
    failed = "84\n\nHook feedback (error):\nthe result was blocked by policy"
    assert "blocked by policy" in await answer_after("What is 12 x 7?", failed, is_error=True)


async def test_an_error_result_is_reported_with_its_reason():
    text = await answer_after("what is 1/0", "division by zero", is_error=True)

    assert text == "The calculator tool failed: division by zero."


# -- prompt-guided dispatch ------------------------------------------------------------------------
async def test_without_native_tools_it_writes_tool_call_tags_for_listed_tools():
    response = await ask([Message.user("What is 12 x 7?")], tools=None,
                         system=PROMPT_GUIDED_SYSTEM)

    assert response.tool_calls == []
    body = response.text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>")
    assert json.loads(body) == {"name": "calculator", "arguments": {"expression": "12*7"}}


async def test_prompt_guided_results_in_a_user_message_get_an_answer():
    history = [Message.user("What is 12 x 7?")]
    history.append((await ask(history, tools=None, system=PROMPT_GUIDED_SYSTEM)).message)
    history.append(Message.user('[Tool results]\n<tool_result name="calculator" status="ok">\n84\n'
                                "</tool_result>\n"))

    response = await ask(history, tools=None, system=PROMPT_GUIDED_SYSTEM)

    assert response.text == "12 × 7 = 84."


async def test_prompt_guided_error_status_is_reported():
    history = [Message.user("fetch https://example.com"),
               Message.assistant('<tool_call>\n{"name": "http_fetch", "arguments": '
                                 '{"url": "https://example.com"}}\n</tool_call>'),
               Message.user('[Tool results]\n<tool_result name="http_fetch" status="error">\n'
                            "blocked address\n</tool_result>\n")]

    response = await ask(history, tools=None, system=PROMPT_GUIDED_SYSTEM)

    assert response.text == "The http_fetch tool failed: blocked address."


async def test_without_tools_or_tool_instructions_it_calls_nothing():
    response = await ask([Message.user("What is 12 x 7?")], tools=None)

    assert "<tool_call>" not in response.text and response.tool_calls == []


# -- the repeat trigger ----------------------------------------------------------------------------
async def run_turn(history: list[Message], limit: int = 20) -> tuple[str, int]:
    """A minimal loop: answer every call with 'pong' until the model stops calling."""
    requests = 0
    while requests < limit:
        requests += 1
        response = await ask(history)
        history.append(response.message)
        if not response.tool_calls:
            return response.text, requests
        assert [(c.name, c.input) for c in response.tool_calls] == [("ping", {})]
        history.append(Message.tool_results(
            [ToolResultBlock(c.id, "pong", name=c.name) for c in response.tool_calls]))
    raise AssertionError("the model never stopped calling")


async def test_call_the_tool_n_times_calls_once_per_request_then_reports():
    history = [Message.user("Please call the ping tool 3 times.")]

    text, requests = await run_turn(history)

    assert text == "Called ping 3 times."
    assert requests == 4


async def test_the_repeat_count_only_counts_the_current_turn():
    history = [Message.user("call ping tool 2 times")]
    await run_turn(history)
    history.append(Message.user("call the ping tool 1 time"))

    text, requests = await run_turn(history)

    assert (text, requests) == ("Called ping 1 times.", 2)


async def test_the_repeat_trigger_needs_the_tool_to_be_offered():
    response = await ask([Message.user("call the nope tool 2 times")])

    assert response.tool_calls == [] and "nope" in response.text


# -- conversation, streaming, usage ----------------------------------------------------------------
@pytest.mark.parametrize(("text", "fragment"), [
    ("hello!", "offline demo model"),
    ("thanks", "You're welcome"),
    ("Tell me about a dragon", 'You said: "Tell me about a dragon"'),
    ("Tell me a story about a dragon", "## The lighthouse keeper's log"),
    ("please write something long", "```python"),
])
async def test_it_answers_conversationally_and_deterministically(text, fragment):
    first = await ask([Message.user(text)])
    second = await ask([Message.user(text)])

    assert fragment in first.text
    assert first.text == second.text


async def test_streaming_deltas_concatenate_to_the_final_text():
    provider = DemoProvider()
    request = ChatRequest(model="demo", messages=[Message.user("Tell me about the sea")])

    events = [e async for e in provider.stream(request)]

    deltas = [e.text for e in events if isinstance(e, StreamText)]
    assert isinstance(events[-1], StreamDone)
    assert len(deltas) > 10
    assert "".join(deltas) == events[-1].response.text


async def test_streaming_respects_the_configured_delays():
    provider = DemoProvider(token_delay_s=0.01, first_token_latency_s=0.05)
    request = ChatRequest(model="demo", messages=[Message.user("hi")])
    started = time.perf_counter()
    stamps = []

    async for event in provider.stream(request):
        if isinstance(event, StreamText):
            stamps.append(time.perf_counter() - started)

    assert stamps[0] >= 0.05
    assert stamps[-1] >= 0.05 + 0.01 * (len(stamps) - 1) * 0.9


async def test_request_latency_delays_a_non_streaming_reply():
    provider = DemoProvider(request_latency_s=0.05)
    started = time.perf_counter()

    await provider.chat(ChatRequest(model="demo", messages=[Message.user("hi")]))

    assert time.perf_counter() - started >= 0.05


async def test_usage_is_estimated_at_four_characters_per_token():
    system = "s" * 40
    response = await ask([Message.user("u" * 10)], tools=None, system=system)

    assert response.usage.input_tokens == math.ceil(50 / 4)
    assert response.usage.output_tokens == math.ceil(len(response.text) / 4)
    assert response.message.usage == response.usage


async def test_a_zero_latency_reply_never_sleeps(monkeypatch):
    # The zero-latency model of the benchmarks: no delay is configured, so nothing waits.
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr("agents.runtime.providers.demo.asyncio.sleep", sleep)
    provider = DemoProvider()
    request = ChatRequest(model="demo", messages=[Message.user("what is 2+2")], tools=TOOLS)
    await provider.chat(request)
    async for _ in provider.stream(request):
        pass
    assert slept == []
    await DemoProvider(request_latency_s=0.01).chat(request)
    assert slept == [0.01]  # the check sees a configured delay


def test_capabilities():
    caps = DemoProvider().capabilities

    assert caps.native_tool_calling and caps.streaming


blocks = st.one_of(
    st.builds(TextBlock, st.text(max_size=60)),
    st.builds(ThinkingBlock, st.text(max_size=20), st.none() | st.text(max_size=5)),
    st.builds(ToolUseBlock, st.text(max_size=8), st.sampled_from([*BUILTIN, "", "ping"]),
              st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5),
                              max_size=3)),
    st.builds(ToolResultBlock, st.text(max_size=8), st.text(max_size=40), st.booleans(),
              st.text(max_size=8)),
)
messages = st.builds(Message, st.sampled_from(list(Role)), st.lists(blocks, max_size=4))
texts = st.sampled_from([
    "call the ping tool 2 times", "what is 2+2", "remember my x is y", "[Tool results]\n",
    '<tool_result name="calculator">', "what time is it in Mars", "forget", "recall",
    "https://", "((((1+", "1/0=", "",
])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(messages | texts.map(Message.user), max_size=8),
       native=st.booleans())
async def test_it_never_raises_on_any_history(history, native):
    request = ChatRequest(model="demo", messages=history, tools=TOOLS if native else None,
                          system=[SystemBlock(PROMPT_GUIDED_SYSTEM)])
    provider = DemoProvider()

    response = await provider.chat(request)
    events = [e async for e in provider.stream(request)]

    assert isinstance(response, ChatResponse)
    assert events[-1].response.text == response.text


async def test_demo_reads_past_the_loops_time_stamp():
    from agents.runtime.messages import Message
    from agents.runtime.providers.base import ChatRequest
    from agents.runtime.providers.demo import DemoProvider

    stamped = await DemoProvider().chat(ChatRequest(model="demo", messages=[Message.user("[2026-11-21 10:00:00 UTC] hello there")]))
    plain = await DemoProvider().chat(ChatRequest(model="demo", messages=[Message.user("hello there")]))
    assert stamped.text == plain.text
    assert "You said" not in stamped.text
