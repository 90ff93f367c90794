"""pricing.json: Claw Code's model prices, cost summaries and usage tracker; ZeroClaw's
configured-price cost records and budget check."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from agents.runtime.messages import Message, Role
from agents.runtime.pricing import Price, Usage
from agents.runtime.upstream_ports import (
    CostTracker,
    UsageRecord,
    UsageTracker,
    check_budget,
    estimate_cost,
    format_usd,
    pricing_for_model,
    summary_lines_for_model,
)
from tests.agents.runtime.conformance import approx_equal, vectors

FILE = "pricing.json"

SONNET_PRICED_AS_OPUS = (
    "Claw Code prices Sonnet like Opus (15/75 per million); Sonnet's price is $3/$15 with cache "
    "writes at $3.75 and reads at $0.30 (test_sonnet_summary_uses_the_sonnet_price)"
)


def usage_from(data: dict[str, Any]) -> Usage:
    return Usage.from_anthropic(data)  # the vectors use Anthropic's field names


def usage_to_vector(usage: Usage, *, total: bool) -> dict[str, int]:
    data = {"cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    return {**data, "total_tokens": usage.total_tokens} if total else data


@pytest.mark.parametrize("v", vectors(FILE, "usage_tracker"))
def test_usage_tracker(v: dict[str, Any]) -> None:
    tracker = UsageTracker()
    for usage in v["input"]:
        tracker.record(usage_from(usage))
    assert {"cumulative": usage_to_vector(tracker.cumulative, total=True),
            "current": usage_to_vector(tracker.current, total=False),
            "turns": tracker.turns} == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "estimate_cost"))
def test_estimate_cost(v: dict[str, Any]) -> None:
    usage = usage_from(v["input"]["usage"])
    cost = estimate_cost(usage, v["input"].get("model"))
    got = {
        "cache_creation_cost_usd": float(cost.cache_write),
        "cache_read_cost_usd": float(cost.cache_read),
        "input_cost_usd": float(cost.input),
        "output_cost_usd": float(cost.output),
        "total_cost_usd": float(cost.total),
        "total_tokens": usage.total_tokens,
        "total_usd_formatted": format_usd(cost.total),
    }
    assert approx_equal(got, v["expected"]), got


@pytest.mark.parametrize("v", vectors(FILE, "summary_lines_for_model", skip={
    "cc.usage.computes_cost_summary_lines.summary_lines": SONNET_PRICED_AS_OPUS}))
def test_summary_lines_for_model(v: dict[str, Any]) -> None:
    i = v["input"]
    assert summary_lines_for_model(usage_from(i["usage"]), i["label"], i.get("model")) == v["expected"]


def sonnet_only(params: list[Any]) -> list[Any]:
    return [p for p in params
            if p.values[0] is None or "sonnet" in (p.values[0]["input"].get("model") or "")]


@pytest.mark.parametrize("v", sonnet_only(vectors(FILE, "summary_lines_for_model")))
def test_sonnet_summary_uses_the_sonnet_price(v: dict[str, Any]) -> None:
    # Deliberate deviation from the vector cc.usage.computes_cost_summary_lines.summary_lines.
    lines = summary_lines_for_model(usage_from(v["input"]["usage"]), "usage",
                                    "claude-sonnet-4-20250514")
    # 1M input at $3 + 0.5M output at $15 + 0.1M cache writes at $3.75 + 0.2M reads at $0.30.
    assert lines == [
        "usage: total_tokens=1800000 input=1000000 output=500000 cache_write=100000 "
        "cache_read=200000 estimated_cost=$10.9350 model=claude-sonnet-4-20250514",
        "  cost breakdown: input=$3.0000 output=$7.5000 cache_write=$0.3750 cache_read=$0.0600",
    ]


@pytest.mark.parametrize("v", vectors(FILE, "pricing_for_model"))
def test_pricing_for_model(v: dict[str, Any]) -> None:
    price = pricing_for_model(v["input"])
    assert price is not None
    got = {"cache_creation": float(price.cache_write), "cache_read": float(price.cache_read),
           "input": float(price.input), "output": float(price.output)}
    assert approx_equal(got, v["expected"])


@pytest.mark.parametrize("v", vectors(FILE, "usage_from_session"))
def test_usage_from_session(v: dict[str, Any]) -> None:
    messages = [Message(role=Role(m["role"]), usage=usage_from(m["usage"]) if m.get("usage") else None)
                for m in v["input"]]
    tracker = UsageTracker.from_messages(messages)
    assert {"cumulative_total_tokens": tracker.cumulative.total_tokens,
            "turns": tracker.turns} == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "cost::TokenUsage::new"))
def test_token_usage_new(v: dict[str, Any]) -> None:
    i = v["input"]
    in_price = float("nan") if i["input_price_per_million"] == "NaN" else i["input_price_per_million"]
    out_price = float("nan") if i["output_price_per_million"] == "NaN" else i["output_price_per_million"]
    record = UsageRecord.new(i["model"], i["input_tokens"], i["output_tokens"], in_price, out_price)
    assert isinstance(record.cost_usd, Decimal)
    assert approx_equal({"cost_usd": float(record.cost_usd), "total_tokens": record.total_tokens},
                        v["expected"])


@pytest.mark.parametrize("v", vectors(FILE, "record_tool_loop_cost_usage"))
def test_record_tool_loop_cost_usage(v: dict[str, Any]) -> None:
    i = v["input"]
    prices = {name: Price(input=p["input"], output=p["output"]) for name, p in i["prices"].items()}
    tracker = CostTracker(prices=prices)
    tracker.record(provider=i["provider"], model=i["model"], usage=Usage(
        input_tokens=i["usage"]["input_tokens"], output_tokens=i["usage"]["output_tokens"]))
    assert approx_equal({"total_tokens": tracker.total_tokens,
                         "cost_usd": float(tracker.total_cost_usd),
                         "request_count": tracker.request_count}, v["expected"])


@pytest.mark.parametrize("v", vectors(FILE, "check_tool_loop_budget + run_tool_call_loop"))
def test_budget_exceeded_message(v: dict[str, Any]) -> None:
    i = v["input"]
    prior = i["prior_usage"]
    spent = UsageRecord.new(prior["model"], prior["input_tokens"], prior["output_tokens"],
                            prior["input_price"], prior["output_price"]).cost_usd
    check = check_budget(daily_spent_usd=spent, monthly_spent_usd=spent,
                         daily_limit_usd=i["daily_limit_usd"],
                         monthly_limit_usd=i["monthly_limit_usd"], estimated_cost_usd=0)
    assert check.exceeded
    assert {"error": check.message} == v["expected"]
