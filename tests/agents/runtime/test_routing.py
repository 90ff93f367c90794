from __future__ import annotations

import pytest

from agents.runtime.routing import (
    PATTERN_SEARCH_LIMIT,
    InvalidRoutingRule,
    ModelRoute,
    RoutingRule,
    classify,
    decide,
    pattern_error,
    resolve_route,
)


def test_no_rules_means_no_route() -> None:
    assert classify("anything at all", []) is None


def test_a_rule_without_keywords_or_patterns_never_matches() -> None:
    assert classify("hello", [RoutingRule(hint="fast")]) is None


def test_highest_priority_wins_and_ties_keep_their_order() -> None:
    rules = [
        RoutingRule(hint="low", keywords=("code",), priority=-1),
        RoutingRule(hint="first-tie", keywords=("code",), priority=5),
        RoutingRule(hint="second-tie", keywords=("code",), priority=5),
        RoutingRule(hint="no-match", keywords=("zebra",), priority=99),
    ]
    assert classify("write code", rules).hint == "first-tie"
    assert classify("write code", list(reversed(rules))).hint == "second-tie"
    assert classify("write code", rules[:1]).hint == "low"


def test_keywords_ignore_case_and_patterns_do_not() -> None:
    rules = [RoutingRule(hint="code", patterns=(r"\bdef \w+\(",)),
             RoutingRule(hint="fast", keywords=("TL;DR",))]
    route = classify("tl;dr please", rules)
    assert (route.hint, route.matched_keyword, route.matched_pattern) == ("fast", "TL;DR", None)
    route = classify("def main(): pass", rules)
    assert (route.hint, route.matched_pattern) == ("code", r"\bdef \w+\(")
    assert classify("DEF MAIN(): pass", rules) is None


def test_keywords_are_literal_and_patterns_are_regular_expressions() -> None:
    keyword = RoutingRule(hint="cpp", keywords=("c++",))
    pattern = RoutingRule(hint="version", patterns=(r"v\d+\.\d+",))
    assert classify("help with C++ templates", [keyword]).hint == "cpp"
    assert classify("upgrade to v2.10 now", [pattern]).matched_pattern == r"v\d+\.\d+"
    assert classify("upgrade to version two", [pattern]) is None
    insensitive = RoutingRule(hint="sql", patterns=(r"(?i)select .* from",))
    assert classify("Select * From users", [insensitive]).hint == "sql"


def test_within_a_rule_keywords_are_reported_before_patterns() -> None:
    rule = RoutingRule(hint="x", keywords=("alpha",), patterns=("beta",))
    assert classify("beta alpha", [rule]).reason == "keyword 'alpha'"


def test_lengths_count_characters_not_bytes() -> None:
    rule = RoutingRule(hint="short", keywords=("é",), max_length=5)
    assert classify("ééééé", [rule]) is not None  # 5 characters, 10 bytes
    assert classify("éééééé", [rule]) is None
    at_least = RoutingRule(hint="long", keywords=("x",), min_length=3)
    assert classify("xx", [at_least]) is None and classify("xxx", [at_least]) is not None


def test_empty_keywords_and_patterns_do_not_match_everything() -> None:
    rule = RoutingRule(hint="oops", keywords=("", "  "), patterns=("",))
    assert classify("any message", [rule]) is None


def test_an_invalid_regex_is_refused_with_a_clear_message() -> None:
    with pytest.raises(InvalidRoutingRule) as excinfo:
        RoutingRule(hint="code", patterns=("fn (",))
    assert isinstance(excinfo.value, ValueError)
    assert "'fn (' is not a valid regular expression" in str(excinfo.value)


def test_other_rule_problems_are_explained() -> None:
    with pytest.raises(ValueError, match="needs a hint"):
        RoutingRule(hint=" ", keywords=("x",))
    with pytest.raises(ValueError, match="could never match"):
        RoutingRule(hint="x", keywords=("x",), min_length=10, max_length=2)


def test_nested_repetition_is_fine_on_the_linear_engine_and_backtracking_features_are_refused() -> None:
    for linear in ("(a+)+$", r"(\w+\s?)*!", r"(?:x|(y+))+z", r"(ab|cd)+", r"a{2,5}b+", r"^/\w+"):
        assert pattern_error(linear) is None, linear
    for backtracking in (r"(?=(a*)*)b", r"(\w++\s?)*!", r"(?>a+)+$", r"(a)\1"):
        assert pattern_error(backtracking) is not None, backtracking


def test_stored_rules_load_leniently_and_never_break_classification() -> None:
    rule = RoutingRule.lenient(hint="code", keywords=("rust",), patterns=("(", r"(a)\1", "fn "))
    assert rule.patterns == ("fn ",)
    assert rule.skipped_patterns == ("(", r"(a)\1")
    assert classify("fn main", [rule]).hint == "code"
    assert classify("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", [rule]) is None
    with pytest.raises(ValueError):
        RoutingRule.from_dict({"hint": "x", "patterns": ["("]})
    assert RoutingRule.from_dict({"hint": "x", "patterns": ["("]}, strict=False).patterns == ()


def test_patterns_only_search_the_start_of_very_long_messages() -> None:
    rule = RoutingRule(hint="tail", patterns=("needle",))
    message = "x" * PATTERN_SEARCH_LIMIT + "needle"
    assert classify(message, [rule]) is None
    assert classify("needle" + message, [rule]) is not None
    keyword = RoutingRule(hint="tail", keywords=("needle",))
    assert classify(message, [keyword]) is not None  # keywords search everything


def test_a_polynomial_pattern_on_a_huge_message_answers() -> None:
    """How fast: ``bench.hostile_input`` (unbounded, this search would take days)."""
    rule = RoutingRule(hint="slow", patterns=(r"\s*\s*x",))
    assert classify(" " * 1_000_000, [rule]) is None
    assert classify(" " * 10 + "x" + " " * 1_000_000, [rule]) is not None


def test_the_route_resolves_to_the_first_model_route_ignoring_case() -> None:
    routes = [ModelRoute("Fast", "anthropic", "claude-haiku-4-5"),
              ModelRoute("fast", "openai", "gpt-4o-mini")]
    route = classify("quick one", [RoutingRule(hint="FAST", keywords=("quick",))])
    assert resolve_route(route, routes) == routes[0]
    assert resolve_route("missing", routes) is None
    assert resolve_route(None, routes) is None


def test_decision_explains_itself_for_the_trace() -> None:
    rules = [RoutingRule(hint="code", patterns=(r"```",), priority=2)]
    decision = decide("```py\nprint(1)\n```", rules, [ModelRoute("code", "openai", "gpt-4o")])
    assert decision.to_dict() == {
        "route": {"hint": "code", "priority": 2, "matched_keyword": None,
                  "matched_pattern": "```"},
        "target": {"hint": "code", "provider": "openai", "model": "gpt-4o"},
    }
    assert decide("hi", rules, []).to_dict() == {"route": None, "target": None}
