"""The hand-written matchers that replace regexes Python's ``re`` would run in quadratic time:
on small inputs (where ``re`` is fine) they must find exactly what the original patterns find.
Each test pins the private helpers of one module of the package."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.runtime.parsing import (
    _fences,
    _json_values,
    _minimax,
    _perl_and_function_call,
    _tag_loop,
    _text,
    map_tool_name_alias,
)

# --------------------------------------------------------------------------------------------
# The linear-time matchers find exactly what the original patterns find
# --------------------------------------------------------------------------------------------
# Python's re would backtrack quadratically on these patterns, so they are matched by hand;
# on small inputs (where re is fine) both must agree.

_TAGGY = st.lists(st.sampled_from([
    "<invoke", "<INVOKE", "<invoke ", " name", "name", "NAME", "=", " = ", '"', "'", "x", ">",
    "</invoke>", "</Invoke>", "<parameter", "</parameter>", "\n", " ", "a", "-", "_",
    "```tool_call\n", "```tool-call", "```invoke\n", "```", "</tool_call>", "</minimax:toolcall>",
    "```tool shell\n", "```tool ", "\t", "TOOL_CALL", "[TOOL_CALL]", "{", "}}", "/TOOL_CALL",
    "[/TOOL_CALL]", 'tool => "shell"', "args => {", '--cmd "ls"', "}",
]), max_size=40).map("".join)


def _reference_value(text: str, q: int):
    try:
        value, end = _json_values._DECODER.raw_decode(text, q)
    except (ValueError, RecursionError):
        return None
    return (value, end) if _json_values._serde_accepts(value, text[q:end]) else None


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(['{', '}', '[', ']', '"', '\\"', ':', ',', ' ', '"a"', '1', 'x',
                                 'null', '\\ud800', 'NaN', '{"a":', '[[', ']]']), max_size=80)
       .map("".join), st.randoms())
def test_json_scanner_matches_a_plain_decode_at_every_position_in_any_order(text, rnd):
    scanner = _json_values._JsonScanner(text)
    positions = [i for i, c in enumerate(text) if c in "{["]
    rnd.shuffle(positions)
    for q in positions:
        assert scanner.value_at(q) == _reference_value(text, q)


def test_json_scanner_matches_a_plain_decode_on_large_nested_input():
    text = ('{"a":' * 40 + "[" * 130 + "1" + "]" * 130 + "}" * 40 + "[1," * 6000 + '"' + "y" * 600
            + "[" * 200 + "]" * 100)
    scanner = _json_values._JsonScanner(text)
    for q in [i for i, c in enumerate(text) if c in "{["][::7]:
        assert scanner.value_at(q) == _reference_value(text, q)


@settings(max_examples=300, deadline=None)
@given(_TAGGY)
def test_minimax_block_matcher_equals_the_original_regex(text):
    for tag in ("invoke", "parameter"):
        pattern = re.compile(rf"""(?is)<{tag}\b[^>]*\bname\s*=\s*(?:"([^"]+)"|'([^']+)')[^>]*>(.*?)</{tag}>""")
        expected = [(m.start(), m.end(), m.group(1) or m.group(2), m.group(3))
                    for m in pattern.finditer(text)]
        assert [tuple(b) for b in _minimax._named_blocks_ci(text, tag)] == expected


@settings(max_examples=300, deadline=None)
@given(_TAGGY)
def test_fence_and_perl_matchers_equal_the_original_regexes(text):
    state = _tag_loop._ParseState(text)
    seek, found = _text._regex_seeker(text, _fences._MD_TOOL_CALL_CLOSE)
    fences = _fences._fence_matches(state, _fences._MD_TOOL_CALL_OPEN,
                                    lambda s: None if seek(s) < 0 else (seek(s), seek(s) + len(found[seek(s)])))
    original = re.compile(r"(?s)```(?:tool[_-]?call|invoke)\s*\n(.*?)(?:```|</tool[_-]?call>|"
                          r"</toolcall>|</invoke>|</minimax:toolcall>)")
    assert [(s, e, b) for s, e, _m, b in fences] == [(m.start(), m.end(), m.group(1))
                                                    for m in original.finditer(text)]

    perl = re.compile(r"(?s)(?:\[TOOL_CALL\]|TOOL_CALL)\s*\{(.+?)\}\}\s*(?:\[/TOOL_CALL\]|/TOOL_CALL)")
    expected = []
    for m in perl.finditer(text):
        name = re.search(r'tool\s*=>\s*"([^"]+)"', m.group(1))
        block = re.search(r"(?s)args\s*=>\s*\{(.+?)(?:\}|\Z)", m.group(1))
        args = dict(re.findall(r'--(\w+)\s+"([^"]+)"', block.group(1) if block else ""))
        if name and args:
            expected.append((map_tool_name_alias(name.group(1)), args))
    assert [(c.name, c.arguments) for c in _perl_and_function_call._parse_perl_style_tool_calls(text)] == expected
