"""Tenant patterns run on RE2 (``agents.runtime.patterns``): hostile patterns finish in linear
time wherever patterns run (routing, the simulator, tool arguments), backtracking-only features
are refused with a sentence, and a stored pattern RE2 refuses never stops a turn."""

from __future__ import annotations

import time

import pytest

from agents.runtime.patterns import PatternError, compile_pattern, pattern_problem
from agents.runtime.routing import RoutingRule, classify
from agents.tools.validation import ArgumentsValidator, argument_problem, schema_problem
from tests.helpers import SUPERLINEAR_S

HOSTILE = [
    ("(a|a)*b", "a" * 100_000),
    ("(a+)+$", "a" * 100_000 + "!"),
    ("(.*a){20}", "a" * 30_000),
    (r"^(\w+\s?)*$", "word " * 20_000 + "!"),
    ("(a|aa)*b", "a" * 100_000),
]


@pytest.mark.parametrize(("pattern", "text"), HOSTILE)
def test_routing_with_a_hostile_pattern_is_linear(pattern, text):
    rule = RoutingRule(hint="slow", patterns=(pattern,))
    started = time.perf_counter()
    classify(text, [rule])
    assert time.perf_counter() - started < SUPERLINEAR_S


@pytest.mark.parametrize(("pattern", "text"), HOSTILE)
def test_tool_arguments_with_a_hostile_schema_pattern_are_validated_in_linear_time(pattern, text):
    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": pattern}},
              "patternProperties": {pattern: {"type": "string"}}, "additionalProperties": False}
    assert schema_problem(schema) is None
    started = time.perf_counter()
    problem = argument_problem(ArgumentsValidator(schema), {"q": text, text[:5000]: "x"})
    assert time.perf_counter() - started < SUPERLINEAR_S
    assert problem is None or "does not match" in problem or "not allowed" in problem


@pytest.mark.parametrize(("pattern", "feature"), [
    (r"(a)\1", "backreference"),
    (r"foo(?=bar)", "lookahead"),
    (r"(?<!x)y", "lookbehind"),
    (r"(?>a+)b", "atomic group"),
    (r"a++b", "possessive"),
])
def test_backtracking_features_are_refused_with_a_sentence(pattern, feature):
    problem = pattern_problem(pattern)
    assert problem and feature in problem and "linear-time" in problem
    with pytest.raises(ValueError, match="linear-time"):
        RoutingRule(hint="x", patterns=(pattern,))
    assert feature in schema_problem({"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}})
    assert feature in schema_problem({"type": "object", "patternProperties": {pattern: {}}})


def test_an_invalid_pattern_and_an_oversized_one_are_refused():
    assert "not a valid regular expression" in pattern_problem("(unclosed")
    assert "characters long" in pattern_problem("a" * 501)
    with pytest.raises(PatternError):
        compile_pattern("x{1000}{1000}{1000}")  # beyond RE2's memory budget


def test_a_stored_pattern_re2_refuses_is_skipped_and_the_rule_still_routes_by_keyword():
    rule = RoutingRule.lenient(hint="code", keywords=("python",), patterns=(r"(a)\1", r"\bdef\b"))
    assert rule.skipped_patterns == (r"(a)\1",)
    assert classify("def main(): pass", [rule]).matched_pattern == r"\bdef\b"
    assert classify("I like python", [rule]).matched_keyword == "python"


def test_case_and_unicode_behave_as_before():
    rule = RoutingRule(hint="x", patterns=(r"(?i)\bsql\b", r"\p{Cyrillic}+", "café"))
    assert classify("Write SQL please", [rule]).matched_pattern == r"(?i)\bsql\b"
    assert classify("привет", [rule]).matched_pattern == r"\p{Cyrillic}+"
    assert classify("un café", [rule]).matched_pattern == "café"
    assert classify("Write sqlite", [RoutingRule(hint="x", patterns=(r"(?i)\bsql\b",))]) is None
    # RE2 reports spans in characters, as re does (the simulator highlights with them)
    assert compile_pattern("café").search("ünç café").span() == (4, 8)
