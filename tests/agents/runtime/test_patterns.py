"""Tenant patterns run on RE2 (``agents.runtime.patterns``): hostile patterns give the right
answer wherever patterns run (routing, the simulator, tool arguments), backtracking-only features
are refused with a sentence, and a stored pattern RE2 refuses never stops a turn. How fast the
hostile patterns run is measured by ``bench.hostile_input``, not here."""

from __future__ import annotations

import pytest

from agents.runtime.patterns import PatternError, compile_pattern, pattern_problem
from agents.runtime.routing import RoutingRule, classify
from agents.tools.validation import ArgumentsValidator, argument_problem, schema_problem

# (pattern, text, routed, valid): catastrophic for a backtracking engine. Routing searches only
# the message's first PATTERN_SEARCH_LIMIT characters (so a pattern anchored at the end matches
# there); a tool argument is matched whole.
HOSTILE = [
    ("(a|a)*b", "a" * 100_000, False, False),
    ("(a+)+$", "a" * 100_000 + "!", True, False),
    ("(.*a){20}", "a" * 30_000, True, True),
    (r"^(\w+\s?)*$", "word " * 20_000 + "!", True, False),
    ("(a|aa)*b", "a" * 100_000, False, False),
]


@pytest.mark.parametrize(("pattern", "text", "routed", "valid"), HOSTILE)
def test_routing_with_a_hostile_pattern_answers(pattern, text, routed, valid):
    rule = RoutingRule(hint="slow", patterns=(pattern,))
    assert (classify(text, [rule]) is not None) is routed


@pytest.mark.parametrize(("pattern", "text", "routed", "valid"), HOSTILE)
def test_tool_arguments_with_a_hostile_schema_pattern_are_validated(pattern, text, routed, valid):
    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": pattern}},
              "patternProperties": {pattern: {"type": "string"}}, "additionalProperties": False}
    assert schema_problem(schema) is None
    problem = argument_problem(ArgumentsValidator(schema), {"q": text})
    assert (problem is None) is valid, problem
    if not valid:
        assert "does not match" in problem


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
