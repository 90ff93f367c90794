from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from agents.runtime.messages import Message
from agents.runtime.pricing import (
    COST_QUANTUM,
    Price,
    Usage,
    cost_usd,
)
from agents.runtime.upstream_ports import (
    DEFAULT_ESTIMATE_PRICE,
    BudgetPeriod,
    BudgetStatus,
    CostTracker,
    UsageTracker,
    budget_exceeded_message,
    check_budget,
    estimate_cost,
    lookup_price,
    pricing_for_model,
    summary_lines_for_model,
)

tokens = st.integers(min_value=0, max_value=10**9)
usages = st.builds(Usage, tokens, tokens, tokens, tokens)
# Per-million prices written with up to 4 decimals, like every real price list.
list_prices = st.decimals(min_value=0, max_value=1000, places=4, allow_nan=False)
any_prices = st.decimals(min_value=0, max_value=1000, allow_nan=False, allow_infinity=False)


def price_of(values: list[Decimal]) -> Price:
    return Price(*values)


@given(usages, usages, st.lists(list_prices, min_size=4, max_size=4))
def test_cost_of_a_sum_is_the_sum_of_costs(a: Usage, b: Usage, rates: list[Decimal]) -> None:
    price = price_of(rates)
    assert cost_usd(a + b, price) == cost_usd(a, price) + cost_usd(b, price)


@given(usages, usages, st.lists(any_prices, min_size=4, max_size=4))
def test_cost_of_a_sum_matches_to_the_quantum_for_any_price(a: Usage, b: Usage,
                                                           rates: list[Decimal]) -> None:
    price = price_of(rates)
    # Each of the four buckets is rounded once per cost: at most one quantum apart each.
    difference = abs(cost_usd(a + b, price) - cost_usd(a, price) - cost_usd(b, price))
    assert difference <= 4 * COST_QUANTUM


@given(usages, st.sampled_from(["input_tokens", "output_tokens", "cache_write_tokens",
                                "cache_read_tokens"]), tokens,
       st.lists(any_prices, min_size=4, max_size=4))
def test_cost_never_falls_when_a_bucket_grows(usage: Usage, bucket: str, extra: int,
                                              rates: list[Decimal]) -> None:
    price = price_of(rates)
    grown = Usage(**{**usage.to_dict(), bucket: getattr(usage, bucket) + extra})
    assert cost_usd(grown, price) >= cost_usd(usage, price)


junk = st.one_of(st.none(), st.integers(min_value=-10**6, max_value=10**9), st.text(max_size=5),
                 st.floats(allow_nan=True), st.booleans())


@given(junk, junk, junk, junk, junk)
def test_openai_details_never_add_tokens(prompt: object, completion: object, cached: object,
                                         written: object, reasoning: object) -> None:
    payload = {"prompt_tokens": prompt, "completion_tokens": completion,
               "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
               "completion_tokens_details": {"reasoning_tokens": reasoning}}
    usage = Usage.from_openai(payload)
    totals_only = Usage.from_openai({"prompt_tokens": prompt, "completion_tokens": completion})
    assert usage.total_tokens == totals_only.total_tokens
    assert usage.reasoning_tokens <= usage.output_tokens


@given(tokens, tokens, tokens, tokens, tokens)
def test_openai_usage_never_exceeds_prompt_plus_completion(prompt: int, completion: int,
                                                           cached: int, written: int,
                                                           reasoning: int) -> None:
    usage = Usage.from_openai({"prompt_tokens": prompt, "completion_tokens": completion,
                               "prompt_tokens_details": {"cached_tokens": cached,
                                                         "cache_write_tokens": written},
                               "completion_tokens_details": {"reasoning_tokens": reasoning}})
    assert usage.total_tokens == prompt + completion
    assert usage.cache_read_tokens + usage.cache_write_tokens <= prompt
    assert usage.input_tokens >= 0


def test_openai_cache_writes_leave_the_input_bucket_and_are_priced_at_the_write_rate() -> None:
    usage = Usage.from_openai({"prompt_tokens": 1000, "completion_tokens": 0,
                               "prompt_tokens_details": {"cached_tokens": 300,
                                                         "cache_write_tokens": 600}})
    price = Price(Decimal("2"), Decimal("8"), cache_write=Decimal("2.5"), cache_read=Decimal("0.2"))

    assert usage == Usage(input_tokens=100, cache_write_tokens=600, cache_read_tokens=300)
    # 100 at $2 + 600 written at $2.50 + 300 read at $0.20, per million.
    assert cost_usd(usage, price) == Decimal("0.0002") + Decimal("0.0015") + Decimal("0.00006")


@given(junk, junk)
def test_anthropic_thinking_tokens_are_a_part_of_output_never_more(output: object,
                                                                   thinking: object) -> None:
    usage = Usage.from_anthropic({"input_tokens": 5, "output_tokens": output,
                                  "output_tokens_details": {"thinking_tokens": thinking}})
    plain = Usage.from_anthropic({"input_tokens": 5, "output_tokens": output})

    assert usage.total_tokens == plain.total_tokens
    assert 0 <= usage.reasoning_tokens <= usage.output_tokens
    assert cost_usd(usage, Price(Decimal(3), Decimal(15))) == cost_usd(plain,
                                                                      Price(Decimal(3), Decimal(15)))


def test_anthropic_thinking_tokens_are_recorded_as_reasoning() -> None:
    usage = Usage.from_anthropic({"input_tokens": 10, "output_tokens": 400,
                                  "output_tokens_details": {"thinking_tokens": 350}})

    assert usage == Usage(input_tokens=10, output_tokens=400, reasoning_tokens=350)


def test_openai_cached_tokens_are_priced_once_at_the_cache_rate() -> None:
    usage = Usage.from_openai({"prompt_tokens": 1000, "completion_tokens": 100,
                               "prompt_tokens_details": {"cached_tokens": 800}})
    price = Price(Decimal("2"), Decimal("8"), cache_read=Decimal("0.5"))
    # 200 uncached at $2 + 800 cached at $0.50 + 100 output at $8, per million.
    assert cost_usd(usage, price) == Decimal("0.0004") + Decimal("0.0004") + Decimal("0.0008")


def test_model_families_are_priced_with_sonnet_at_its_list_price() -> None:
    assert pricing_for_model("claude-sonnet-4-5") == Price(Decimal(3), Decimal(15),
                                                           Decimal("3.75"), Decimal("0.3"))
    assert pricing_for_model("CLAUDE-3-5-HAIKU").input == Decimal(1)
    assert pricing_for_model("anthropic/claude-opus-4-1").output == Decimal(75)
    assert pricing_for_model("gpt-4o") is None
    cost = estimate_cost(Usage(input_tokens=1_000_000), "claude-sonnet-4")
    assert cost.total == Decimal(3)
    assert estimate_cost(Usage(input_tokens=1_000_000), "llama3").total == DEFAULT_ESTIMATE_PRICE.input


def test_summary_lines_without_a_model_use_the_default_estimate_unmarked() -> None:
    lines = summary_lines_for_model(Usage(input_tokens=1000), "turn")
    assert lines[0] == ("turn: total_tokens=1000 input=1000 output=0 cache_write=0 "
                        "cache_read=0 estimated_cost=$0.0150")


def test_usage_tracker_rebuilds_from_message_usage() -> None:
    messages = [Message.user("hi"),
                Message.assistant("a", usage=Usage(input_tokens=10, output_tokens=2)),
                Message.assistant("b", usage=Usage(input_tokens=20, cache_read_tokens=5))]
    tracker = UsageTracker.from_messages(messages)
    assert tracker.turns == 2
    assert tracker.current == Usage(input_tokens=20, cache_read_tokens=5)
    assert tracker.cumulative.total_tokens == 37


def test_price_lookup_order() -> None:
    exact, qualified, suffix = Price(Decimal(1)), Price(Decimal(2)), Price(Decimal(3))
    prices = {"openai/gpt-4o": qualified, "gpt-4o": suffix}
    assert lookup_price(prices, provider="openai", model="gpt-4o") is suffix
    assert lookup_price({"openai/gpt-4o": qualified}, provider="openai", model="gpt-4o") is qualified
    assert lookup_price({"gpt-4o": suffix}, provider="router", model="openai/gpt-4o") is suffix
    assert lookup_price({"x/gpt-4o": exact}, provider="router", model="x/gpt-4o") is exact
    assert lookup_price(prices, provider="openai", model="o3") is None


def test_cost_tracker_skips_empty_calls_and_records_unpriced_models_at_zero() -> None:
    tracker = CostTracker(prices={"m": Price(Decimal(3), Decimal(15))})
    assert tracker.record(provider="p", model="m", usage=Usage()) is None
    tracker.record(provider="p", model="m", usage=Usage(input_tokens=1000, output_tokens=200))
    unpriced = tracker.record(provider="p", model="other", usage=Usage(input_tokens=5))
    assert unpriced is not None and unpriced.cost_usd == 0
    assert tracker.request_count == 2
    assert tracker.total_cost_usd == Decimal("0.006")


def test_budget_checks_day_then_month_then_warns() -> None:
    ok = check_budget(daily_spent_usd=1, monthly_spent_usd=10)
    assert ok.status == BudgetStatus.ALLOWED and ok.message == ""
    warn = check_budget(daily_spent_usd=Decimal("7.5"), monthly_spent_usd=10,
                        estimated_cost_usd=Decimal("0.5"))
    assert (warn.status, warn.period) == (BudgetStatus.WARNING, BudgetPeriod.DAY)
    month = check_budget(daily_spent_usd=1, monthly_spent_usd=Decimal("99.99"),
                         estimated_cost_usd=Decimal("0.02"))
    assert (month.status, month.period, month.current_usd) == (
        BudgetStatus.EXCEEDED, BudgetPeriod.MONTH, Decimal("99.99"))
    assert month.message == ("Budget exceeded: $99.9900 of $100.00 Month limit. "
                             "Cannot make further API calls until the budget resets.")
    assert check_budget(daily_spent_usd=50, monthly_spent_usd=500, enabled=False).status == \
        BudgetStatus.ALLOWED
    assert check_budget(daily_spent_usd=float("nan"), monthly_spent_usd=0).status == \
        BudgetStatus.ALLOWED


def test_budget_message_rounds_like_the_original() -> None:
    assert budget_exceeded_message(Decimal("0.15"), 0.001, BudgetPeriod.DAY) == (
        "Budget exceeded: $0.1500 of $0.00 Day limit. Cannot make further API calls until "
        "the budget resets.")
