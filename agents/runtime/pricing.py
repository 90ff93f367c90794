"""Token usage in four buckets and what it costs.

Usage is normalised once, at the provider boundary, so that the four buckets never overlap:

* ``input_tokens``       prompt tokens billed at the full input rate (cache misses);
* ``cache_write_tokens`` prompt tokens written to the provider's prompt cache;
* ``cache_read_tokens``  prompt tokens served from the prompt cache;
* ``output_tokens``      generated tokens, reasoning included (providers bill them as output).

``reasoning_tokens`` is reported beside the buckets, as a part of ``output_tokens``; it is never
added to a total or priced a second time.

OpenAI reports cached tokens *inside* ``prompt_tokens`` (``prompt_tokens_details.cached_tokens``)
and reasoning inside ``completion_tokens``; Anthropic reports ``cache_creation_input_tokens``
and ``cache_read_input_tokens`` *beside* ``input_tokens``. The two constructors below are the
only places that know this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from decimal import ROUND_HALF_EVEN, Decimal
from enum import StrEnum
from typing import Any, Protocol

MILLION = Decimal(1_000_000)
# Costs are kept to 1e-10 USD: exact for every per-million price written with up to 4 decimals.
COST_QUANTUM = Decimal("0.0000000001")


def _count(value: Any) -> int:
    """A token count from a provider payload: missing, null, negative or junk -> 0."""
    if value is None or isinstance(value, bool):
        return 0
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return 0
    return max(number, 0)


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Every token the model read: the three input buckets."""
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Usage)))

    def is_zero(self) -> bool:
        return self.total_tokens == 0 and self.reasoning_tokens == 0

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(Usage)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        data = data or {}
        return cls(**{f.name: _count(data.get(f.name)) for f in fields(Usage)})

    @classmethod
    def from_openai(cls, usage: dict[str, Any] | None) -> Usage:
        """OpenAI Chat Completions ``usage``: cached and reasoning tokens are *inside* the totals."""
        usage = usage or {}
        prompt = _count(usage.get("prompt_tokens"))
        completion = _count(usage.get("completion_tokens"))
        prompt_details = usage.get("prompt_tokens_details") or {}
        completion_details = usage.get("completion_tokens_details") or {}
        cached = min(_count(prompt_details.get("cached_tokens")), prompt)
        reasoning = min(_count(completion_details.get("reasoning_tokens")), completion)
        return cls(
            input_tokens=prompt - cached,
            output_tokens=completion,
            cache_write_tokens=0,
            cache_read_tokens=cached,
            reasoning_tokens=reasoning,
        )

    @classmethod
    def from_anthropic(cls, usage: dict[str, Any] | None) -> Usage:
        """Anthropic Messages ``usage``: cache fields are reported *beside* ``input_tokens``."""
        usage = usage or {}
        return cls(
            input_tokens=_count(usage.get("input_tokens")),
            output_tokens=_count(usage.get("output_tokens")),
            cache_write_tokens=_count(usage.get("cache_creation_input_tokens")),
            cache_read_tokens=_count(usage.get("cache_read_input_tokens")),
        )


def _rate(value: Any) -> Decimal:
    """A per-million price; non-finite, negative or junk prices count as zero (as ZeroClaw does)."""
    try:
        rate = Decimal(str(value))
    except Exception:  # noqa: BLE001 - any junk price is zero
        return Decimal(0)
    if not rate.is_finite() or rate <= 0:
        return Decimal(0)
    return rate


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens for each bucket. ``cache_write``/``cache_read`` default to input."""

    input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)
    cache_write: Decimal | None = None
    cache_read: Decimal | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "input", _rate(self.input))
        object.__setattr__(self, "output", _rate(self.output))
        for name in ("cache_write", "cache_read"):
            value = getattr(self, name)
            object.__setattr__(self, name, self.input if value is None else _rate(value))

    def to_dict(self) -> dict[str, str]:
        return {
            "input": str(self.input),
            "output": str(self.output),
            "cache_write": str(self.cache_write),
            "cache_read": str(self.cache_read),
        }


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    input: Decimal
    output: Decimal
    cache_write: Decimal
    cache_read: Decimal

    @property
    def total(self) -> Decimal:
        return self.input + self.output + self.cache_write + self.cache_read


def _bucket_cost(tokens: int, rate: Decimal | None) -> Decimal:
    if not tokens or not rate:
        return Decimal(0)
    return (Decimal(tokens) * rate / MILLION).quantize(COST_QUANTUM, rounding=ROUND_HALF_EVEN)


def cost_breakdown(usage: Usage, price: Price) -> CostBreakdown:
    return CostBreakdown(
        input=_bucket_cost(usage.input_tokens, price.input),
        output=_bucket_cost(usage.output_tokens, price.output),
        cache_write=_bucket_cost(usage.cache_write_tokens, price.cache_write),
        cache_read=_bucket_cost(usage.cache_read_tokens, price.cache_read),
    )


def cost_usd(usage: Usage, price: Price) -> Decimal:
    """The cost of ``usage`` at ``price``. Each token sits in exactly one bucket, so no token is
    priced twice; reasoning tokens are part of ``output_tokens`` and are not priced again."""
    return cost_breakdown(usage, price).total


# ---------------------------------------------------------------------------------------------
# Model families and cost summaries (Claw Code ``usage.rs``)
# ---------------------------------------------------------------------------------------------
HAIKU_PRICE = Price(Decimal("1"), Decimal("5"), Decimal("1.25"), Decimal("0.1"))
OPUS_PRICE = Price(Decimal("15"), Decimal("75"), Decimal("18.75"), Decimal("1.5"))
# Claw Code prices Sonnet like Opus (15/75/18.75/1.5); Anthropic's list price is $3/$15 with
# cache writes at 1.25x and reads at 0.1x input. Users are billed the list price.
SONNET_PRICE = Price(Decimal("3"), Decimal("15"), Decimal("3.75"), Decimal("0.3"))
# For a model no family matches, cost is estimated high rather than low (Claw Code's default).
DEFAULT_ESTIMATE_PRICE = Price(Decimal("15"), Decimal("75"), Decimal("18.75"), Decimal("1.5"))


def pricing_for_model(model: str) -> Price | None:
    """The price of a Claude family named anywhere in ``model`` (haiku, then opus, then
    sonnet, case-insensitive), or None."""
    normalized = model.lower()
    for family, price in (("haiku", HAIKU_PRICE), ("opus", OPUS_PRICE), ("sonnet", SONNET_PRICE)):
        if family in normalized:
            return price
    return None


def estimate_cost(usage: Usage, model: str | None = None) -> CostBreakdown:
    """Cost at the model family's price, or at ``DEFAULT_ESTIMATE_PRICE`` when unknown."""
    price = pricing_for_model(model) if model is not None else None
    return cost_breakdown(usage, price or DEFAULT_ESTIMATE_PRICE)


def _round(amount: Decimal, places: int) -> Decimal:
    return amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)


def format_usd(amount: Decimal | float | int) -> str:
    """``$`` and four decimals, as the cost summaries show money."""
    return f"${_round(_usd(amount), 4)}"


def summary_lines_for_model(usage: Usage, label: str, model: str | None = None) -> list[str]:
    """A usage line and a cost-breakdown line. A model outside the known families is priced at
    the default estimate and marked ``pricing=estimated-default``."""
    known = pricing_for_model(model) if model is not None else None
    cost = cost_breakdown(usage, known or DEFAULT_ESTIMATE_PRICE)
    model_suffix = f" model={model}" if model is not None else ""
    pricing_suffix = " pricing=estimated-default" if model is not None and known is None else ""
    return [
        f"{label}: total_tokens={usage.total_tokens} input={usage.input_tokens} "
        f"output={usage.output_tokens} cache_write={usage.cache_write_tokens} "
        f"cache_read={usage.cache_read_tokens} estimated_cost={format_usd(cost.total)}"
        f"{model_suffix}{pricing_suffix}",
        f"  cost breakdown: input={format_usd(cost.input)} output={format_usd(cost.output)} "
        f"cache_write={format_usd(cost.cache_write)} cache_read={format_usd(cost.cache_read)}",
    ]


class _HasUsage(Protocol):
    @property
    def usage(self) -> Usage | None: ...


@dataclass(slots=True)
class UsageTracker:
    """Usage across a conversation: the latest call's, the running total and the call count."""

    current: Usage = field(default_factory=Usage)
    cumulative: Usage = field(default_factory=Usage)
    turns: int = 0

    def record(self, usage: Usage) -> None:
        self.current = usage
        self.cumulative = self.cumulative + usage
        self.turns += 1

    @classmethod
    def from_messages(cls, messages: Iterable[_HasUsage]) -> UsageTracker:
        """Rebuild the tracker from the usage stored on each message."""
        tracker = cls()
        for message in messages:
            if message.usage is not None:
                tracker.record(message.usage)
        return tracker


# ---------------------------------------------------------------------------------------------
# Configured prices and budgets (ZeroClaw ``cost``)
# ---------------------------------------------------------------------------------------------
def _usd(value: Any) -> Decimal:
    """A dollar amount from config or arithmetic; non-finite or junk values count as zero."""
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value))
    except Exception:  # noqa: BLE001 - junk is zero
        return Decimal(0)
    return amount if amount.is_finite() else Decimal(0)


def lookup_price(prices: Mapping[str, Price], *, provider: str, model: str) -> Price | None:
    """``prices[model]``, then ``prices["provider/model"]``, then the part of ``model`` after
    its last ``/``; None when none is configured."""
    for key in (model, f"{provider}/{model}", model.rsplit("/", 1)[-1]):
        if key in prices:
            return prices[key]
    return None


@dataclass(frozen=True, slots=True)
class UsageRecord:
    model: str
    usage: Usage
    cost_usd: Decimal

    @property
    def total_tokens(self) -> int:
        return self.usage.total_tokens

    @classmethod
    def new(cls, model: str, input_tokens: int, output_tokens: int,
            input_price_per_million: Any, output_price_per_million: Any) -> UsageRecord:
        """ZeroClaw's ``TokenUsage::new``: prices that are not finite and positive are zero."""
        usage = Usage(input_tokens=max(input_tokens, 0), output_tokens=max(output_tokens, 0))
        price = Price(input=input_price_per_million, output=output_price_per_million)
        return cls(model=model, usage=usage, cost_usd=cost_usd(usage, price))


@dataclass(slots=True)
class CostTracker:
    """The model calls of one run, priced from the configured table."""

    prices: Mapping[str, Price] = field(default_factory=dict)
    records: list[UsageRecord] = field(default_factory=list)

    def record(self, *, provider: str, model: str, usage: Usage) -> UsageRecord | None:
        """Price and keep one call's usage; calls that used no tokens are not recorded. A model
        with no configured price is recorded at zero cost."""
        if usage.total_tokens == 0:
            return None
        price = lookup_price(self.prices, provider=provider, model=model) or Price()
        record = UsageRecord(model=model, usage=usage, cost_usd=cost_usd(usage, price))
        self.records.append(record)
        return record

    @property
    def request_count(self) -> int:
        return len(self.records)

    @property
    def total_tokens(self) -> int:
        return sum(r.total_tokens for r in self.records)

    @property
    def total_cost_usd(self) -> Decimal:
        return sum((r.cost_usd for r in self.records), Decimal(0))


class BudgetPeriod(StrEnum):
    DAY = "Day"
    MONTH = "Month"


class BudgetStatus(StrEnum):
    ALLOWED = "allowed"
    WARNING = "warning"
    EXCEEDED = "exceeded"


def budget_exceeded_message(current_usd: Any, limit_usd: Any, period: BudgetPeriod) -> str:
    return (f"Budget exceeded: ${_round(_usd(current_usd), 4)} of ${_round(_usd(limit_usd), 2)} "
            f"{period} limit. Cannot make further API calls until the budget resets.")


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    status: BudgetStatus
    current_usd: Decimal = Decimal(0)
    limit_usd: Decimal = Decimal(0)
    period: BudgetPeriod | None = None

    @property
    def exceeded(self) -> bool:
        return self.status == BudgetStatus.EXCEEDED

    @property
    def message(self) -> str:
        """The error text for an exceeded budget; empty otherwise."""
        if not self.exceeded or self.period is None:
            return ""
        return budget_exceeded_message(self.current_usd, self.limit_usd, self.period)


def check_budget(*, daily_spent_usd: Any, monthly_spent_usd: Any,
                 daily_limit_usd: Any = Decimal(10), monthly_limit_usd: Any = Decimal(100),
                 estimated_cost_usd: Any = Decimal(0), warn_at_percent: int = 80,
                 enabled: bool = True) -> BudgetCheck:
    """ZeroClaw's check before every model call: exceeded when today's (then this month's)
    spend plus the call's estimate goes over the limit; a warning from ``warn_at_percent``."""
    if not enabled:
        return BudgetCheck(BudgetStatus.ALLOWED)
    daily, monthly = _usd(daily_spent_usd), _usd(monthly_spent_usd)
    daily_limit, monthly_limit = _usd(daily_limit_usd), _usd(monthly_limit_usd)
    estimate = max(_usd(estimated_cost_usd), Decimal(0))
    spans = ((daily, daily_limit, BudgetPeriod.DAY), (monthly, monthly_limit, BudgetPeriod.MONTH))
    for spent, limit, period in spans:
        if spent + estimate > limit:
            return BudgetCheck(BudgetStatus.EXCEEDED, spent, limit, period)
    warn_ratio = Decimal(min(max(warn_at_percent, 0), 100)) / 100
    for spent, limit, period in spans:
        if spent + estimate >= limit * warn_ratio:
            return BudgetCheck(BudgetStatus.WARNING, spent, limit, period)
    return BudgetCheck(BudgetStatus.ALLOWED)
