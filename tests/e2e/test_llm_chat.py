"""A chat in the browser with an agent whose model runs on a real llama.cpp server
(``make test-llm``; skipped without a server, saying why).

Two agents on that server, each with the clock tool and one iteration of tools, so a turn is:
the call, the tool, the model's answer. In native dispatch the provider forces the call with
``tool_choice`` (SmolLM2-135M never chooses a tool by itself: it reads the time off the system
prompt). In prompt-guided (XML) dispatch nothing can force it, so the user asks the model to
repeat a ``<tool_call>`` block, which at temperature 0 it does on every run; the model's own
text then goes through the dispatcher's parser, the tool runs, and its result goes back as
``[Tool results]`` text.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_chat import STREAM_PROBE
from tests.llm.live import LIVE, MODEL, URL, server_streams_usage

pytestmark = LIVE

TIME_TOOL = "current_time"
ASK = {
    "Local native": "What time is it in Tokyo?",
    "Local unstreamed": "What time is it in Tokyo?",
    "Local XML": ('Repeat exactly this text:\n<tool_call>\n{"name": "current_time", '
                  '"arguments": {"timezone": "Asia/Tokyo"}}\n</tool_call>'),
}
AGENTS = {
    "Local native": {
        "provider": {"kind": "openai", "base_url": URL, "options": {"extra_body": {
            "tool_choice": {"type": "function", "function": {"name": TIME_TOOL}}}}},
        "fields": {"tool_dispatcher": "native", "max_tool_iterations": 1,
                   "system_prompt": "You tell people the time with the current_time tool."},
    },
    # Streaming switched off in the provider's settings: whole requests, the answer at once.
    "Local unstreamed": {
        "provider": {"kind": "openai", "base_url": URL, "capabilities": {"streaming": False},
                     "options": {"extra_body": {
                         "tool_choice": {"type": "function", "function": {"name": TIME_TOOL}}}}},
        "fields": {"tool_dispatcher": "native", "max_tool_iterations": 1,
                   "system_prompt": "You tell people the time with the current_time tool."},
    },
    "Local XML": {
        "provider": {"kind": "openai", "base_url": URL},
        "fields": {"tool_dispatcher": "xml", "max_tool_iterations": 1,
                   "system_prompt": "You tell people the time with the current_time tool."},
    },
}


@pytest.fixture(scope="module")
def llm_agents(stack):
    spec = {"agents": [{"name": name, "model": MODEL, "tools": [TIME_TOOL],
                        **conf, "fields": {"temperature": 0, "max_output_tokens": 96,
                                           **conf["fields"]}}
                       for name, conf in AGENTS.items()]}
    stack.ids["agents"].update(stack.seed(spec)["agents"])
    return list(AGENTS)


TOKENS = re.compile(r"([\d.]+[kM]?) → ([\d.]+[kM]?)")


@pytest.mark.parametrize("agent", ["Local native", "Local XML", "Local unstreamed"],
                         ids=["native", "xml", "streaming-off"])
def test_a_chat_on_a_real_model_shows_the_tool_card_the_streamed_answer_and_counted_tokens(
        login, llm_agents, agent):
    s = login("alice")
    # In XML dispatch nothing forces the call: the system prompt holds the current time, so
    # the model's greedy output varies from run to run, and about one run in six it answers
    # without repeating the block (or writes it malformed). Such a turn is asked again, in a new
    # conversation each time (an answer without the call in the history makes the next one
    # likelier to skip it too), at most eight times in all: four once fell short in CI.
    for _attempt in range(8 if agent == "Local XML" else 1):
        s.open_chat_with(agent)
        s.page.evaluate(STREAM_PROBE)
        s.send(ASK[agent])
        ended = s.answers("completed").first
        s.page.locator("li.answer .tool-card").or_(ended).first.wait_for(timeout=120_000)
        ended.wait_for(timeout=120_000)
        if ended.locator(".tool-card").count():
            break
    answer = s.page.locator("li.answer[data-status='completed']", has=s.page.locator(
        ".tool-card")).last
    card = answer.locator(".tool-card").first
    assert card.locator(".tool-name").inner_text() == TIME_TOOL
    answer.locator(".tool-card.state-ok").first.wait_for(timeout=60_000)

    lengths = s.page.evaluate("() => window.__stream")
    final = answer.locator(".md").inner_text().strip()
    assert final
    if agent == "Local unstreamed":  # no deltas: the answer arrives whole
        assert len(set(lengths)) <= 1, lengths
    else:
        # It was streamed: part of it was on the page before the whole. (How many renders that
        # takes depends on the model's speed: a small model on a fast machine writes a short
        # answer within one or two of the page's 120 ms renders.)
        assert lengths and lengths == sorted(lengths) and lengths[0] < len(final), (lengths, final)
    assert "malformed" not in s.page.locator("#messages").inner_text()  # a call is not an error
    done = answer.locator(".tool-card.state-ok").first
    done.locator("summary").click()
    assert "time zone" in done.locator(".tool-pre").last.inner_text()  # the tool's real output
    assert int(s.page.locator("#meter").get_attribute("data-tokens")) > 0

    trace = answer.locator("a.trace-link").get_attribute("href")
    assert re.fullmatch(r"/traces/[0-9a-f-]+/", trace), trace
    s.page.goto(s.stack.url + trace)
    requests = s.page.locator("#steps li.step.k-llm_request")
    assert requests.count() == 2  # the call, then the answer
    # llama.cpp counts tokens in a whole answer but not in a stream
    estimated = agent != "Local unstreamed" and not server_streams_usage()
    for index in range(requests.count()):
        summary = requests.nth(index).locator("summary")
        counted = TOKENS.search(summary.locator(".step-tok").inner_text())
        assert counted and "0" not in (counted[1], counted[2]), summary.inner_text()
        if estimated:  # llama.cpp sends no token counts in a stream: they must say so
            flags = summary.evaluate(
                "el => el.innerText + ' ' + [...el.querySelectorAll('[title]')]"
                ".map(e => e.title).join(' ')")
            assert "estimated" in flags.lower(), flags
    assert not s.watch.errors


MCP_TOOL = "time_get_current_time"  # the stack's stdio MCP time server (tests/e2e/conftest.py)


@pytest.fixture(scope="module")
def llm_mcp_agent(stack):
    spec = {"agents": [{
        "name": "Local MCP", "model": MODEL, "tools": [MCP_TOOL],
        "provider": {"kind": "openai", "base_url": URL, "options": {"extra_body": {
            "tool_choice": {"type": "function", "function": {"name": MCP_TOOL}}}}},
        "fields": {"tool_dispatcher": "native", "max_tool_iterations": 1, "temperature": 0,
                   "max_output_tokens": 96,
                   "system_prompt": f"You tell people the time with the {MCP_TOOL} tool."}}]}
    stack.ids["agents"].update(stack.seed(spec)["agents"])
    return "Local MCP"


def test_a_real_model_calls_an_mcp_tool_that_a_member_approves(login, llm_mcp_agent):
    s = login("bob")
    s.open_chat_with(llm_mcp_agent)
    s.send("What time is it in Tokyo?")
    waiting = s.page.locator(".tool-card.state-waiting")
    waiting.wait_for(timeout=120_000)  # the MCP server's tools ask a person first
    assert waiting.locator(".tool-name").inner_text() == MCP_TOOL
    waiting.locator("button:has-text('Approve')").click()
    answer = s.answers("completed").first
    answer.wait_for(timeout=120_000)
    card = answer.locator(".tool-card").first
    card.locator("summary").click()
    result = card.locator(".tool-pre").last.inner_text()
    # The model chose the arguments: a real zone gets the server's time, anything else the
    # server's own error; either way the call went to the MCP server and came back.
    assert '"datetime"' in result or "timezone" in result.lower(), result
    assert "Approved by bob." in card.inner_text()
    assert answer.locator(".md").inner_text().strip()
    assert not s.watch.errors
