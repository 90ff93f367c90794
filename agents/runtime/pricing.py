"""Token usage in four buckets and what it costs.

Usage is normalised once, at the provider boundary, so that the four buckets never overlap:

* ``input_tokens``       prompt tokens billed at the full input rate (cache misses);
* ``cache_write_tokens`` prompt tokens written to the provider's prompt cache;
* ``cache_read_tokens``  prompt tokens served from the prompt cache;
* ``output_tokens``      generated tokens, reasoning included (providers bill them as output).

``reasoning_tokens`` is reported beside the buckets, as a part of ``output_tokens``; it is never
added to a total or priced a second time.

OpenAI reports cache reads and writes *inside* ``prompt_tokens``
(``prompt_tokens_details.cached_tokens`` and ``.cache_write_tokens``) and reasoning inside
``completion_tokens`` (``completion_tokens_details.reasoning_tokens``); Anthropic reports
``cache_creation_input_tokens`` and ``cache_read_input_tokens`` *beside* ``input_tokens``, and
reasoning inside ``output_tokens`` (``output_tokens_details.thinking_tokens``). The two
constructors below are the only places that know this. The other details both APIs give
(audio, image and text parts of the prompt, accepted and rejected prediction tokens, the cache
writes by lifetime) are parts of the totals above and have no bucket of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

MILLION = Decimal(1_000_000)
# Costs are kept to 1e-10 USD: exact for every per-million price written with up to 4 decimals.
COST_QUANTUM = Decimal("0.0000000001")


# No request comes near this many tokens; a larger count is junk (and would overflow the cost's
# decimal precision).
MAX_TOKEN_COUNT = 10**12


def _count(value: Any) -> int:
    """A token count from a provider payload: missing, null, negative, absurd or junk -> 0."""
    if value is None or isinstance(value, bool):
        return 0
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return 0
    return number if 0 <= number <= MAX_TOKEN_COUNT else 0


def _details(value: Any) -> dict[str, Any]:
    """A ``*_tokens_details`` object; null or junk reads as empty."""
    return value if isinstance(value, dict) else {}


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
        return Usage(*(getattr(self, name) + getattr(other, name) for name in TOKEN_FIELDS))

    def is_zero(self) -> bool:
        return self.total_tokens == 0 and self.reasoning_tokens == 0

    def to_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in TOKEN_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        data = data or {}
        return cls(**{name: _count(data.get(name)) for name in TOKEN_FIELDS})

    @classmethod
    def from_openai(cls, usage: dict[str, Any] | None) -> Usage:
        """OpenAI Chat Completions ``usage``: cached and reasoning tokens are *inside* the totals."""
        usage = usage or {}
        prompt = _count(usage.get("prompt_tokens"))
        completion = _count(usage.get("completion_tokens"))
        prompt_details = _details(usage.get("prompt_tokens_details"))
        completion_details = _details(usage.get("completion_tokens_details"))
        cached = min(_count(prompt_details.get("cached_tokens")), prompt)
        written = min(_count(prompt_details.get("cache_write_tokens")), prompt - cached)
        reasoning = min(_count(completion_details.get("reasoning_tokens")), completion)
        return cls(
            input_tokens=prompt - cached - written,
            output_tokens=completion,
            cache_write_tokens=written,
            cache_read_tokens=cached,
            reasoning_tokens=reasoning,
        )

    @classmethod
    def from_anthropic(cls, usage: dict[str, Any] | None) -> Usage:
        """Anthropic Messages ``usage``: cache fields are reported *beside* ``input_tokens``."""
        usage = usage or {}
        output = _count(usage.get("output_tokens"))
        thinking = _count(_details(usage.get("output_tokens_details")).get("thinking_tokens"))
        return cls(
            input_tokens=_count(usage.get("input_tokens")),
            output_tokens=output,
            cache_write_tokens=_count(usage.get("cache_creation_input_tokens")),
            cache_read_tokens=_count(usage.get("cache_read_input_tokens")),
            reasoning_tokens=min(thinking, output),
        )


# Usage's counters in declaration order, the four buckets then reasoning. Stored usage (the
# Django side's token columns, to_dict/from_dict) uses these names, so they are spelled once.
TOKEN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Usage))


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
