"""query_classification.json: ZeroClaw's classify_with_decision and the route it selects.

Our patterns are regular expressions where ZeroClaw's are substrings; every pattern in the
vectors is a plain word, which matches the same either way (case-sensitively).
"""

from __future__ import annotations

from typing import Any

import pytest

from agents.runtime.routing import ModelRoute, RoutingRule, classify, decide, resolve_route
from tests.agents.runtime.conformance import vectors

FILE = "query_classification.json"

# What the vectors' notes say the channel path calls on a match.
EXPECTED_TARGETS = {
    "zc.classify.process_channel_message_applies_query_classification_route":
        ("vision-provider", "gpt-4-vision"),
    "zc.classify.process_channel_message_classification_priority_selects_highest":
        ("code-provider", "code-model"),
}


def run(v: dict[str, Any]) -> dict[str, Any] | None:
    cfg = v["input"]["config"]
    if not cfg.get("enabled", False):
        return None  # classification switched off for the agent: nothing is classified
    rules = [RoutingRule.from_dict(r) for r in cfg["rules"]]
    route = classify(v["input"]["message"], rules)
    return None if route is None else {"hint": route.hint, "priority": route.priority}


@pytest.mark.parametrize("v", vectors(FILE, "classify"))
def test_classify(v: dict[str, Any]) -> None:
    assert run(v) == v["expected"]


def with_routes(params: list[Any]) -> list[Any]:
    """The vectors that also name model routes (or the 'absent' placeholder)."""
    return [p for p in params if p.values[0] is None
            or {"model_routes", "route_model_by_hint"} & p.values[0]["input"].keys()]


@pytest.mark.parametrize("v", with_routes(vectors(FILE, "classify")))
def test_classified_hint_selects_the_model_route(v: dict[str, Any]) -> None:
    routes = [ModelRoute(**r) for r in v["input"].get("model_routes", [])]
    routes += [ModelRoute(hint, *model.split("/", 1))
               for hint, model in v["input"].get("route_model_by_hint", {}).items()]
    classified = run(v)
    target = resolve_route(classified["hint"] if classified else None, routes)
    if v["id"] in EXPECTED_TARGETS:
        assert target is not None
        assert (target.provider, target.model) == EXPECTED_TARGETS[v["id"]]
    elif v["expected"] is None:
        assert target is None  # the agent's default provider and model answer
    else:
        assert target is not None and target.hint == v["expected"]["hint"]


def test_seed_example_routes_quick_summaries_to_haiku() -> None:
    # turn_routes_with_hint_when_query_classification_matches, end to end.
    rules = [RoutingRule(hint="fast", keywords=("quick", "brief", "tldr"), priority=10)]
    routes = [ModelRoute("fast", "anthropic", "claude-haiku-4-5")]
    decision = decide("quick summary please", rules, routes)
    assert decision.route is not None and decision.route.matched_keyword == "quick"
    assert decision.target == ModelRoute("fast", "anthropic", "claude-haiku-4-5")
