from __future__ import annotations

import pytest

from agents.runtime.dispatch import (
    TOOL_PROTOCOL,
    NativeToolDispatcher,
    VisibleTextFilter,
    XmlToolDispatcher,
    select_dispatcher,
    tools_section,
)
from agents.runtime.messages import (
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agents.runtime.providers.base import Capabilities, ChatResponse
from agents.runtime.tools import ToolSpec

SPECS = [ToolSpec("shell", "Run a command.", {"type": "object", "properties": {"command": {"type": "string"}}}),
         ToolSpec("calc", "Do maths.")]


def ids():
    counter = iter(range(1, 100))
    return lambda: f"call_{next(counter)}"


def response(*blocks) -> ChatResponse:
    return ChatResponse(message=Message(Role.ASSISTANT, list(blocks)))


@pytest.mark.parametrize(("mode", "native", "expected"), [
    ("native", False, "native"), ("xml", True, "xml"),
    ("auto", True, "native"), ("auto", False, "xml"), ("anything", True, "native"),
])
def test_select_dispatcher(mode, native, expected):
    assert select_dispatcher(mode, Capabilities(native_tool_calling=native)).name == expected


def test_xml_prompt_instructions_are_exact():
    assert XmlToolDispatcher.prompt_instructions() == (
        "## Tool Use Protocol\n\nTo use a tool, wrap a JSON object in <tool_call></tool_call> tags:"
        "\n\n```\n<tool_call>\n{\"name\": \"tool_name\", \"arguments\": {\"param\": \"value\"}}\n"
        "</tool_call>\n```\n\n")


def test_the_xml_system_section_lists_each_tool_with_its_schema():
    section = XmlToolDispatcher().system_section(SPECS)
    assert section.startswith(
        "## Tools\n\n- **shell**: Run a command.\n"
        "  Parameters: `{\"properties\":{\"command\":{\"type\":\"string\"}},\"type\":\"object\"}`\n"
        "- **calc**: Do maths.\n")
    assert TOOL_PROTOCOL in section
    assert XmlToolDispatcher().system_section([]) == ""
    assert NativeToolDispatcher().system_section(SPECS) == ""
    assert tools_section([]) == "## Tools\n\n"


def test_xml_format_results_marks_status():
    results = [ToolResultBlock("a", "ok", False, "shell"), ToolResultBlock("b", "Error: x", True, "calc")]
    assert XmlToolDispatcher.format_results(results) == (
        '[Tool results]\n<tool_result name="shell" status="ok">\nok\n</tool_result>\n'
        '<tool_result name="calc" status="error">\nError: x\n</tool_result>\n')


def test_xml_parse_gives_calls_generated_ids():
    parsed = XmlToolDispatcher().parse_response(
        response(TextBlock('Run it.\n<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>'
                           '\n<tool_call>{"name": "calc", "arguments": {}}</tool_call>')),
        new_id=ids(), known_tools=frozenset())
    assert parsed.calls == [ToolUseBlock("call_1", "shell", {"command": "ls"}),
                            ToolUseBlock("call_2", "calc", {})]
    assert parsed.from_text and parsed.parse_issue is None
    assert "<tool_call>" not in parsed.text and "Run it." in parsed.text


def test_xml_parse_reports_an_unreadable_call():
    parsed = XmlToolDispatcher().parse_response(
        response(TextBlock("<tool_call>{oops</tool_call>")), new_id=ids(), known_tools=frozenset())
    assert parsed.calls == [] and parsed.parse_issue


def test_native_parse_uses_provider_ids_and_fills_missing_ones():
    parsed = NativeToolDispatcher().parse_response(
        response(TextBlock("ok"), ToolUseBlock("toolu_9", "shell", {}), ToolUseBlock("", "calc", {})),
        new_id=ids(), known_tools=frozenset({"shell", "calc"}))
    assert [c.id for c in parsed.calls] == ["toolu_9", "call_1"]
    assert parsed.text == "ok" and not parsed.from_text


def test_native_parse_falls_back_to_text_calls_for_known_tools_only():
    text = '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>'
    native = NativeToolDispatcher()
    parsed = native.parse_response(response(TextBlock(text)), new_id=ids(),
                                   known_tools=frozenset({"shell"}))
    assert parsed.calls == [ToolUseBlock("call_1", "shell", {"command": "ls"})] and parsed.from_text
    other = native.parse_response(response(TextBlock(text)), new_id=ids(),
                                  known_tools=frozenset({"calc"}))
    assert other.calls == []
    plain = native.parse_response(response(TextBlock('{"name": "shell", "arguments": {}}')),
                                  new_id=ids(), known_tools=frozenset({"shell"}))
    assert plain.calls == []


def test_xml_wire_form_of_tool_messages():
    xml = XmlToolDispatcher()
    results = Message.tool_results([ToolResultBlock("call_1", "42", False, "calc")])
    wire = xml.to_wire(results)
    assert wire.role is Role.USER
    assert wire.text == '[Tool results]\n<tool_result name="calc" status="ok">\n42\n</tool_result>\n'


def test_xml_wire_form_shows_every_call_in_the_protocol_form_with_its_id():
    # Written by the model in any dialect, or returned natively: the history shows the calls
    # made, each with its id (so a copy of one is recognisable as a quote), and not the ones
    # the model only quoted.
    xml = XmlToolDispatcher()
    raw = ('Sure.\n<tool_call>{"name": "calc", "arguments": {}}</tool_call>\n'
           '<tool_call>{"id": "call_0", "name": "quoted", "arguments": {}}</tool_call>')
    stored = Message(Role.ASSISTANT, [TextBlock(raw), ToolUseBlock("call_1", "calc", {})])
    wire = xml.to_wire(stored)
    assert wire.tool_uses == []
    assert wire.text == 'Sure.\n<tool_call>\n{"id": "call_1", "name": "calc", "arguments": {}}\n</tool_call>'
    native = Message(Role.ASSISTANT, [ThinkingBlock("hmm"), TextBlock("Sure."),
                                      ToolUseBlock("toolu_1", "calc", {"x": 1})])
    wire = xml.to_wire(native)
    assert wire.tool_uses == []
    assert wire.text == ('Sure.\n<tool_call>\n{"id": "toolu_1", "name": "calc", "arguments": {"x": 1}}'
                         '\n</tool_call>')
    only_calls = Message(Role.ASSISTANT, [ToolUseBlock("call_2", "calc", {})])
    assert xml.to_wire(only_calls).text == '<tool_call>\n{"id": "call_2", "name": "calc", "arguments": {}}\n</tool_call>'
    assert isinstance(wire.blocks[0], ThinkingBlock)
    plain = Message.user("hi")
    assert xml.to_wire(plain) is plain
    assert NativeToolDispatcher().to_wire(native) is native


@pytest.mark.parametrize(("chunks", "shown"), [
    (["Hello ", "world"], "Hello world"),
    (["<think>plan</think>Answer"], "Answer"),
    (["<th", "ink>plan</thi", "nk>Ans", "wer"], "Answer"),
    (["Use <tool_call>", '{"name": "x"}', "</tool_call> done"], "Use  done"),
    (["a < b and <b>bold</b>"], "a < b and <b>bold</b>"),
    (["trailing <"], "trailing <"),
    (["<think>never closed"], ""),
])
def test_visible_text_filter(chunks, shown):
    visible = VisibleTextFilter()
    out = "".join(visible.feed(c) for c in chunks) + visible.flush()
    assert out == shown


def test_prompt_guided_calls_reach_a_team_tool_by_its_alias_and_unknown_names_stay_calls():
    from agents.runtime.dispatch import XmlToolDispatcher
    from agents.runtime.messages import Message
    from agents.runtime.providers.base import ChatResponse

    ids = iter(range(1, 100))
    text = '<tool_call>\n<fetch>{"url": "https://example.com"}</fetch>\n</tool_call>\n<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
    parsed = XmlToolDispatcher().parse_response(
        ChatResponse(message=Message.assistant(text)), new_id=lambda: f"c{next(ids)}", known_tools=frozenset({"fetch"})
    )
    assert [c.name for c in parsed.calls] == ["fetch", "nope"]
    assert parsed.calls[0].input == {"url": "https://example.com"}
