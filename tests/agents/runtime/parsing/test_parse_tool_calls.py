"""Tool calls read from model text: realistic outputs, hostile input, and the contracts of
``parse_tool_calls`` that the conformance vectors do not pin (arguments always a dict, names as
written in JSON, never raising, linear time)."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.runtime.parsing import (
    ToolCall,
    build_native_assistant_history,
    build_native_assistant_history_from_parsed_calls,
    detect_tool_call_parse_issue,
    extract_json_values,
    parse_arguments_value,
    parse_tool_calls,
    resolve_display_text,
    strip_think_tags,
)


def calls_of(text: str) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in parse_tool_calls(text)[1]]


# --------------------------------------------------------------------------------------------
# Realistic model outputs
# --------------------------------------------------------------------------------------------


def test_qwen_hermes_block_after_reasoning():
    text = ("<think>\nThe user wants the weather. I should call get_weather.\n</think>\n\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
            "\"unit\": \"celsius\"}}\n</tool_call>")
    visible, calls = parse_tool_calls(text)
    assert visible == ""
    assert [(c.name, c.arguments, c.id) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}, None)]


def test_hermes_parallel_calls_keep_order_and_surrounding_text():
    text = ("I'll look both up.\n"
            "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"rust\"}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"python\"}}\n</tool_call>\n"
            "Back soon.")
    visible, calls = parse_tool_calls(text)
    assert visible == "I'll look both up.\nBack soon."
    assert [c.arguments["q"] for c in calls] == ["rust", "python"]


def test_openai_message_json_with_ids_and_string_arguments():
    text = json.dumps({
        "content": "Checking two files.",
        "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "file_read", "arguments": "{\"path\": \"a.txt\"}"}},
            {"id": "call_b", "type": "function",
             "function": {"name": "file_read", "arguments": "{\"path\": \"b.txt\"}"}},
        ],
    })
    visible, calls = parse_tool_calls(text)
    assert visible == "Checking two files."
    assert [(c.id, c.arguments) for c in calls] == [("call_a", {"path": "a.txt"}),
                                                    ("call_b", {"path": "b.txt"})]


def test_unicode_arguments_and_text_survive():
    text = ("好的，我来写入文件。\n<tool_call>{\"name\": \"file_write\", \"arguments\": "
            "{\"path\": \"笔记.md\", \"content\": \"你好 🌏\\nłódź — naïve\"}}</tool_call>\n完成 ✅")
    visible, calls = parse_tool_calls(text)
    assert visible == "好的，我来写入文件。\n完成 ✅"
    assert calls[0].arguments == {"path": "笔记.md", "content": "你好 🌏\nłódź — naïve"}


def test_think_blocks_between_calls_are_removed_and_unclosed_think_hides_the_rest():
    text = ("<think>first</think><tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>"
            "<think>second</think>Middle<tool_call>{\"name\":\"b\",\"arguments\":{}}</tool_call>"
            "<think>half a thought and <tool_call>{\"name\":\"c\",\"arguments\":{}}</tool_call>")
    visible, calls = parse_tool_calls(text)
    assert visible == "Middle"
    assert [c.name for c in calls] == ["a", "b"]


def test_tool_call_fence_is_a_call_but_a_json_fence_is_not():
    fenced_call = "On it.\n```tool_call\n{\"name\": \"shell\", \"arguments\": {\"command\": \"df -h\"}}\n```"
    assert calls_of(fenced_call) == [("shell", {"command": "df -h"})]

    example = ("To delete a folder you would call:\n```json\n"
               "{\"name\": \"shell\", \"arguments\": {\"command\": \"rm -rf /\"}}\n```\nDon't run it.")
    visible, calls = parse_tool_calls(example)
    assert calls == []
    assert visible == example


@pytest.mark.parametrize("text", [
    "<tool_call>{\"name\": \"shell\", \"arguments\": {\"command\": \"ls\"</tool_call>",
    "<tool_call>{\"name\": \"shell\", \"argu",  # a stream cut mid-call
    "<tool_call>{'name': 'shell', 'arguments': {'command': 'ls'}}</tool_call>",  # not JSON
    "<tool_call>{\"name\": \"shell\", \"arguments\": {\"n\": NaN}}</tool_call>",  # serde refuses
    "I ran {\"name\": \"shell\", \"arguments\": {\"command\": \"ls\"}} earlier.",
    "{\"name\": \"shell\", \"arguments\": {\"command\": \"ls\"}} and that is the format.",
    "<tool_call></tool_call>",
])
def test_broken_or_bare_json_never_becomes_a_call(text):
    assert parse_tool_calls(text)[1] == []


def test_declaration_echo_followed_by_a_real_call_runs_only_the_call():
    text = ("<tools>\n[{\"name\": \"shell\", \"description\": \"Run\", \"parameters\": {}}]\n</tools>\n"
            "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"uptime\"}}\n</tool_call>")
    visible, calls = parse_tool_calls(text)
    assert calls_of(text) == [("shell", {"command": "uptime"})]
    assert visible.startswith("[{\"name\": \"shell\"")


def test_minimax_markup_with_json_parameter_values():
    text = ("<minimax:tool_call>\n<invoke name=\"http_request\">\n"
            "<parameter name=\"url\">https://example.com</parameter>\n"
            "<parameter name=\"headers\">{\"Accept\": \"application/json\"}</parameter>\n"
            "</invoke>\n</minimax:tool_call>")
    assert calls_of(text) == [("http_request", {"url": "https://example.com",
                                                "headers": {"Accept": "application/json"}})]


# --------------------------------------------------------------------------------------------
# Arguments, names and ids
# --------------------------------------------------------------------------------------------


def test_arguments_that_are_not_an_object_become_empty_with_an_error():
    text = ("<tool_call>{\"name\":\"a\",\"arguments\":\"ls -la\"}</tool_call>"
            "<tool_call>{\"name\":\"b\",\"arguments\":[1,2]}</tool_call>"
            "<tool_call>{\"name\":\"c\",\"arguments\":null}</tool_call>"
            "<tool_call>{\"name\":\"d\",\"arguments\":\"\"}</tool_call>"
            "<tool_call>{\"name\":\"e\"}</tool_call>"
            "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}</tool_call>")
    calls = parse_tool_calls(text)[1]
    assert [(c.name, c.arguments) for c in calls] == [
        ("a", {}), ("b", {}), ("c", {}), ("d", {}), ("e", {}), ("f", {"x": 1})]
    errors = {c.name: c.arguments_error for c in calls}
    assert "not valid JSON" in errors["a"]
    assert "must be a JSON object" in errors["b"]
    assert errors["c"] is errors["d"] is errors["e"] is errors["f"] is None


def test_parse_arguments_value_keeps_zeroclaws_raw_result():
    assert parse_arguments_value(None) is None
    assert parse_arguments_value([1]) == [1]
    assert parse_arguments_value("[1]") == [1]
    assert parse_arguments_value("nope") == {}
    assert parse_arguments_value() == {}


def test_json_call_names_are_used_as_written_but_xml_shorthand_is_alias_mapped():
    # Deliberate: a user-defined "web_search" tool must not turn into "shell".
    assert calls_of("<tool_call>{\"name\":\"web_search\",\"arguments\":{\"query\":\"x\"}}</tool_call>") \
        == [("web_search", {"query": "x"})]
    assert calls_of("<tool_call><bash>{\"command\":\"ls\"}</bash></tool_call>") \
        == [("shell", {"command": "ls"})]


def test_call_ids_come_from_any_of_the_id_keys():
    text = json.dumps([{"name": "a", "arguments": {}, "tool_call_id": " t1 "},
                       {"name": "b", "arguments": {}, "call_id": "c2"},
                       {"function": {"name": "c", "arguments": {}, "id": "f3"}, "id": "outer"},
                       {"name": "d", "arguments": {}, "id": 7}])
    assert [c.id for c in parse_tool_calls(text)[1]] == ["t1", "c2", "f3", None]


def test_glm_line_without_a_tool_name_is_not_a_call():
    # Deliberate: ZeroClaw made a call with an empty name out of "/usr/bin > out".
    assert parse_tool_calls("Run this:\n/usr/bin>out.txt")[1] == []
    assert calls_of("shell/command>uptime") == [("shell", {"command": "uptime"})]


def test_function_call_block_after_a_stray_close_tag_does_not_hang():
    # ZeroClaw looped forever here: its clean-up found the close tag before the open tag.
    text = ("</FunctionCall>\n<FunctionCall>\nfile_read\n<code>path>/etc/hosts</code>\n"
            "</FunctionCall>")
    visible, calls = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("file_read", {"path": "/etc/hosts"})]
    assert visible == "</FunctionCall>"


# --------------------------------------------------------------------------------------------
# JSON as serde_json reads it
# --------------------------------------------------------------------------------------------


def test_extract_json_values_follows_serde_json():
    assert extract_json_values("[NaN] [Infinity] [1e400] {\"a\": 1} [-0.5]") == [{"a": 1}, [-0.5]]
    deepest = json.loads("[" * 127 + "]" * 127)
    assert extract_json_values("[" * 127 + "]" * 127) == [deepest]
    # One level more is past serde's recursion limit; the scan then finds the value inside it.
    assert extract_json_values("[" * 128 + "]" * 128) == [deepest]
    assert extract_json_values("[" * 5000 + "]" * 5000) == [deepest]
    assert extract_json_values("{\"s\": \"\\ud800\"} {\"s\": \"\\ud83d\\ude00\"}") == [{"s": "😀"}]


def test_strip_think_tags():
    assert strip_think_tags("  <think>a</think> b <think>c</think>d  ") == "b d"
    assert strip_think_tags("keep</think> this") == "keep</think> this"
    assert strip_think_tags("x<think>never closed") == "x"


# --------------------------------------------------------------------------------------------
# Loop helpers
# --------------------------------------------------------------------------------------------


def test_parse_issue_is_reported_only_for_tool_shaped_text_without_calls():
    assert detect_tool_call_parse_issue("<tool_call>{oops}</tool_call>", []) is not None
    assert detect_tool_call_parse_issue('{"tool_calls": 3}', []) is not None
    assert detect_tool_call_parse_issue("<tool_call>x</tool_call>", [ToolCall("a")]) is None
    assert detect_tool_call_parse_issue("All done.", []) is None


def test_display_text_never_shows_a_raw_prompt_guided_payload():
    raw = "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>"
    assert resolve_display_text(raw, "", True, False) == ""
    assert resolve_display_text("Working on it", "", True, True) == "Working on it"
    assert resolve_display_text("raw", "parsed", False, False) == "parsed"


def test_native_history_json_is_compact_sorted_and_keeps_unicode():
    built = build_native_assistant_history("  ", [{"id": "c1", "name": "w",
                                                   "arguments": {"city": "Zürich"}}])
    assert built == '{"content":null,"tool_calls":[{"arguments":"{\\"city\\":\\"Zürich\\"}","id":"c1","name":"w"}]}'
    calls = [ToolCall("a", {"b": 1}, "x"), ToolCall("c", {}, None)]
    assert build_native_assistant_history_from_parsed_calls("t", calls) is None
    assert build_native_assistant_history_from_parsed_calls("t", []) is None


# --------------------------------------------------------------------------------------------
# Hostile input: never raise, stay linear
# --------------------------------------------------------------------------------------------

FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<tool_calls>", "<toolcall>", "</tool-call>", "<tools>",
    "</tools>", "<invoke>", "</invoke>", '<invoke name="', "<invoke name='x'>",
    '<parameter name="p">', "</parameter>", "<minimax:tool_call>", "</minimax:toolcall>", "{", "}",
    "[", "]", '"', "\\", ":", ",", '"name"', '"arguments"', '"function"', '"tool_calls"', "null",
    "1", "-", "```tool_call\n", "```tool shell\n", "```", "\n", " ", "TOOL_CALL", "/TOOL_CALL",
    "tool => ", '--cmd "', "<FunctionCall>", "</FunctionCall>", "<code>", "<think>", "</think>",
    "\x00", "\ud800", "\udfff", "é", "你好", "\u2028", "\xa0", "\x1c", "shell", "file_write",
    "shell/command>ls", "shell>", ">", "/>", '="', "(", ")", '"path"', '"content"', "\\u",
    "\\ud800", "<a>", "</a>", "NaN", "1e999",
]
SOUP = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=60).map("".join)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["name", "arguments", "parameters", "function", "tool_calls", "id", "x"])
        | st.text(max_size=5), inner, max_size=4),
    max_leaves=25)
MIXED = st.lists(SOUP | JSON_VALUES.map(json.dumps) | st.text(), max_size=6).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(MIXED)
def test_never_raises_and_always_returns_named_calls_with_dict_arguments(text):
    visible, calls = parse_tool_calls(text)
    assert isinstance(visible, str)
    for call in calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
        assert call.id is None or (isinstance(call.id, str) and call.id)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(MIXED)
def test_the_internal_parser_raises_nothing_either(text):
    # The public function has a safety net; this makes sure nothing relies on it.
    from agents.runtime.parsing import _parse_raw

    _parse_raw(text)


PLAIN = st.text(alphabet=string.ascii_letters + string.digits + " .,!?éü中", max_size=20)
IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
ARGS = st.dictionaries(IDENT, PLAIN | st.integers() | st.booleans() | st.none(), max_size=4)


@settings(max_examples=200, deadline=None)
@given(IDENT, ARGS, PLAIN, PLAIN)
def test_a_tagged_json_call_round_trips(name, arguments, before, after):
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    visible, calls = parse_tool_calls(f"{before}\n<tool_call>\n{payload}\n</tool_call>\n{after}")
    assert [(c.name, c.arguments) for c in calls] == [(name, arguments)]
    assert visible == "\n".join(p.strip() for p in (before, after) if p.strip())


PROSE = st.text(alphabet=string.ascii_letters + " .,!?", min_size=1, max_size=30).filter(str.strip)


@settings(max_examples=200, deadline=None)
@given(PROSE, IDENT, ARGS, PROSE)
def test_bare_json_inside_prose_is_never_a_call(before, name, arguments, after):
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    assert parse_tool_calls(f"{before} {payload} {after}")[1] == []
    assert parse_tool_calls(f"{before}\n{payload}\n{after}")[1] == []


@settings(max_examples=200, deadline=None)
@given(PLAIN, PLAIN)
def test_reasoning_never_reaches_the_visible_text(secret, answer):
    secret = f"SECRET{secret}"
    visible, _calls = parse_tool_calls(f"<think>{secret}</think>{answer}<think>{secret}")
    assert "SECRET" not in visible


MEGABYTE = 1_000_000


def repeat(unit: str) -> str:
    return (unit * (MEGABYTE // len(unit) + 1))[:MEGABYTE]


@pytest.mark.parametrize("text", [
    repeat("<tool_call>"),
    repeat("<tool_call>{"),
    repeat('<invoke name="'),
    repeat('<invoke name="x" ') + "</invoke>",
    repeat("{"),
    repeat("["),
    "[" * (MEGABYTE // 2) + "]" * (MEGABYTE // 2),
    repeat('{"a":'),
    repeat('["[[[["'),
    repeat("<tools>"),
    repeat("```tool_call\n"),
    repeat("TOOL_CALL {"),
    repeat("<think>"),
    repeat("<t>"),
], ids=["tool_call", "tool_call+brace", "invoke_name", "invoke_name_closed", "braces",
        "brackets", "balanced_deep", "object_chain", "strings_in_brackets", "tools", "fences",
        "perl", "think", "xml_tags"])
def test_a_megabyte_of_hostile_input_parses_without_error(text, caplog):
    """How fast: ``bench.hostile_input`` (every one of these inputs)."""
    visible, calls = parse_tool_calls(text)
    assert isinstance(visible, str) and calls == []  # none of them holds a whole call
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # no swallowed exception


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 3000), st.integers(0, 3000), st.sampled_from(["[", "{", '{"a":', '["', "[1,"]),
       st.sampled_from(["]", "}", "]}", ""]), st.sampled_from(["", "<tool_call>", "<tools>"]))
def test_deeply_nested_brackets_never_raise(opens, closes, opener, closer, tag):
    from agents.runtime.parsing import _parse_raw

    _parse_raw(tag + opener * opens + closer * closes)


def test_many_real_calls_in_a_megabyte_are_all_found():
    unit = '<tool_call>{"name":"a","arguments":{"i":1}}</tool_call>\n'
    _visible, calls = parse_tool_calls(repeat(unit))
    assert len(calls) == MEGABYTE // len(unit)  # every whole one; the cut last one is not
    assert {(c.name, json.dumps(c.arguments)) for c in calls} == {("a", '{"i": 1}')}
