"""``dispatcher.json``: the prompt-guided parser and result format of ZeroClaw's XmlToolDispatcher.

Our prompt-guided dispatch reads calls with ``parsing.parse_tool_calls``, the parser of ZeroClaw's
main loop (``run_tool_call_loop``), which our loop follows. It extracts the same calls as the
XmlToolDispatcher for every vector but two, where the dispatcher's behaviour would hurt users.
"""

from __future__ import annotations

import pytest

from agents.runtime.dispatch import XmlToolDispatcher
from agents.runtime.messages import ToolResultBlock, ToolUseBlock
from tests.agents.runtime.conformance import vectors

DEVIATIONS = {
    "zc.dispatch.code_derived.unclosed_tag_kept_as_text": (
        "upstream bug: an unclosed <tool_call> makes the text before it appear twice "
        "('Hi\\nHi <tool_call>...'); we show it once and, like ZeroClaw's main-loop parser, run "
        "the complete call after the tag (test_an_unclosed_tag_does_not_duplicate_text)"),
    "zc.dispatch.code_derived.alias_tag_not_recognized": (
        "the dispatcher ignores <toolcall>, so the call is neither run nor hidden from the user; "
        "ZeroClaw's main-loop parser, which we use, accepts the aliases models emit "
        "(test_the_toolcall_alias_is_recognised)"),
}


@pytest.mark.parametrize("vector", vectors("dispatcher.json", "xml_dispatcher_parse",
                                           skip=DEVIATIONS))
def test_xml_dispatcher_parse(vector):
    text, calls = XmlToolDispatcher().parse_text(vector["input"])
    got = [{"name": c.name, "arguments": c.input} for c in calls]
    assert got == vector["expected"]["calls"]
    assert text == vector["expected"]["text"]


@pytest.mark.parametrize("vector", vectors("dispatcher.json", "xml_format_results"))
def test_xml_format_results(vector):
    results = [ToolResultBlock(f"id{i}", r["output"], not r["success"], r["name"])
               for i, r in enumerate(vector["input"])]
    assert XmlToolDispatcher.format_results(results) == vector["expected"]


def test_an_unclosed_tag_does_not_duplicate_text():
    # Deliberate deviation from zc.dispatch.code_derived.unclosed_tag_kept_as_text.
    text, calls = XmlToolDispatcher().parse_text('Hi <tool_call>{"name":"shell"}')
    assert text == "Hi"
    assert calls == [ToolUseBlock("call_1", "shell", {})]


def test_the_toolcall_alias_is_recognised():
    # Deliberate deviation from zc.dispatch.code_derived.alias_tag_not_recognized.
    text, calls = XmlToolDispatcher().parse_text(
        '<toolcall>{"name":"shell","arguments":{"command":"ls"}}</toolcall>')
    assert text == ""
    assert calls == [ToolUseBlock("call_1", "shell", {"command": "ls"})]
