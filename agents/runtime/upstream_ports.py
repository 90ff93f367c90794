"""Upstream functions the product does not call, kept so the conformance vectors can check them.

ZeroClaw's and Claw Code's own tests pin these (the vectors run by
``tests/agents/runtime/conformance``), but agentsite has no use for them: chat-channel scope
keys, ``/stop`` detection, the turn time budget and channel-side history hygiene; the upstream
history estimates and auto-compaction trigger; Claw Code's model-family prices and cost summary
lines; ZeroClaw's configured-price cost tracker and budget check. What the product does use
lives in ``history``, ``pricing``, ``commands`` and ``memory_context`` (and, for budgets and
cost roll-ups, in the Django apps). Product code must not import this module; drop a function
here together with its vectors rather than wiring it in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from enum import StrEnum
from typing import Any, Protocol

from .commands import command_word
from .history.compaction import DEFAULT_PRESERVE_RECENT, CompactionResult, compact
from .history.shapes import (
    H,
    as_message,
    content_text,
    is_tool_result_message,
    role_of,
)
from .history.tokens import estimate_message_tokens, estimate_turn_tokens
from .messages import Message, TextBlock
from .pricing import CostBreakdown, Price, Usage, cost_breakdown, cost_usd

MESSAGE_TIMEOUT_SCALE_CAP = 4
PROACTIVE_CONTEXT_BUDGET_CHARS = 400_000
DEFAULT_AUTO_COMPACT_INPUT_TOKENS = 100_000


# ---------------------------------------------------------------------------------------------
# Chat channels (ZeroClaw ``channels``)
# ---------------------------------------------------------------------------------------------
def is_stop_command(text: str) -> bool:
    """True for ``/stop``: the first word, ``@botname`` removed, compared ignoring case."""
    found = command_word(text)
    return found is not None and found[0].lower() == "/stop"



def message_timeout_budget_secs(message_timeout_secs: int, max_tool_iterations: int,
                                scale_cap: int = MESSAGE_TIMEOUT_SCALE_CAP) -> int:
    """A turn's time budget: the per-message timeout times the tool-iteration limit, with the
    multiplier between 1 and ``scale_cap``."""
    scale = min(max(max_tool_iterations, 1), max(scale_cap, 1))
    return max(message_timeout_secs, 0) * scale


def interruption_scope_key(channel: str, reply_target: str, sender: str,
                           scope_id: str | None = None) -> str:
    """Which in-flight reply a ``/stop`` (or a newer message) from this sender interrupts."""
    base = f"{channel}_{reply_target}_{sender}"
    return f"{base}_{scope_id}" if scope_id else base


def _is_empty(item: Message | Mapping[str, Any]) -> bool:
    if isinstance(item, Message):
        return all(isinstance(b, TextBlock) and not b.text for b in item.blocks)
    return not content_text(item)


def _merge_turns(last: H, new: H) -> H:
    if not isinstance(last, Message) and not isinstance(new, Message):
        previous = content_text(last)
        joined = previous + ("\n\n" if previous else "") + content_text(new)
        return {**last, "content": joined}
    last, new = as_message(last), as_message(new)
    blocks = list(last.blocks)
    incoming = list(new.blocks)
    if blocks and incoming and isinstance(blocks[-1], TextBlock) \
            and isinstance(incoming[0], TextBlock):
        joined = blocks[-1].text + ("\n\n" if blocks[-1].text else "") + incoming[0].text
        blocks[-1] = TextBlock(joined)
        incoming = incoming[1:]
    usage = last.usage if new.usage is None else (
        new.usage if last.usage is None else last.usage + new.usage)
    return Message(last.role, blocks + incoming, usage)


def normalize_cached_channel_turns(turns: Sequence[H]) -> list[H]:
    """Make a stored conversation alternate user/assistant again.

    A user turn where an assistant turn was expected (an interrupted turn) is merged into the
    previous turn with a blank line, and likewise for assistant turns; an assistant turn with
    nothing before it is dropped. Tool messages pass through and are followed by an assistant
    turn. System messages pass through untouched."""
    normalized: list[H] = []
    expecting_user = True
    for turn in turns:
        role = role_of(turn)
        if role == "system":
            normalized.append(turn)
        elif role == "tool" or (expecting_user and role == "user"):
            normalized.append(turn)
            expecting_user = False
        elif not expecting_user and role == "assistant":
            normalized.append(turn)
            expecting_user = True
        elif role in ("user", "assistant"):
            if not normalized or role_of(normalized[-1]) == "system" or _is_empty(turn):
                continue
            if isinstance(turn, Message) and is_tool_result_message(normalized[-1]):
                # Folding user text into a tool message would break the tool protocol; a user
                # turn right after tool results is valid on its own.
                normalized.append(turn)
                continue
            normalized[-1] = _merge_turns(normalized[-1], turn)
    return normalized


def proactive_trim_turns(turns: list[H], budget_chars: int = PROACTIVE_CONTEXT_BUDGET_CHARS) -> int:
    """Drop the oldest turns until the history's characters fit ``budget_chars``; the last turn
    is always kept, and no tool result is left first. Returns how many turns were dropped."""
    excess = sum(len(content_text(t)) for t in turns) - budget_chars
    if excess <= 0:
        return 0
    dropped = 0
    while excess > 0 and len(turns) - dropped > 1:
        excess -= len(content_text(turns[dropped]))
        dropped += 1
    while len(turns) - dropped > 1 and is_tool_result_message(turns[dropped]):
        dropped += 1
    del turns[:dropped]
    return dropped


# ---------------------------------------------------------------------------------------------
# History estimates and auto-compaction (ZeroClaw, Claw Code)
# ---------------------------------------------------------------------------------------------
def estimate_session_tokens(messages: Iterable[Message | Mapping[str, Any]]) -> int:
    return sum(estimate_message_tokens(as_message(m)) for m in messages)


def estimate_history_tokens(messages: Iterable[Message | Mapping[str, Any]]) -> int:
    """ZeroClaw's estimate, framing included: Σ(ceil(bytes/4) + 4) over messages."""
    return sum(estimate_turn_tokens(m) for m in messages)


_THRESHOLD_RE = re.compile(r"\+?[0-9]+")
_U32_MAX = 2**32 - 1


def parse_auto_compaction_threshold(value: str | None) -> int:
    """The cumulative-input-token threshold for auto-compaction: a positive 32-bit integer, or
    the 100,000 default for anything else (missing, 0, junk)."""
    if value is None or not _THRESHOLD_RE.fullmatch(value):
        return DEFAULT_AUTO_COMPACT_INPUT_TOKENS
    number = int(value)
    return number if 0 < number <= _U32_MAX else DEFAULT_AUTO_COMPACT_INPUT_TOKENS


def auto_compact(messages: Sequence[Message | Mapping[str, Any]], *, cumulative_input_tokens: int,
                 threshold: int = DEFAULT_AUTO_COMPACT_INPUT_TOKENS,
                 preserve_recent: int = DEFAULT_PRESERVE_RECENT) -> CompactionResult | None:
    """Claw Code's auto-compaction after an assistant message: once the conversation's
    cumulative input tokens reach ``threshold``, compact whatever precedes the recent messages.
    None below the threshold."""
    if cumulative_input_tokens < threshold:
        return None
    return compact(messages, preserve_recent=preserve_recent, max_estimated_tokens=0)


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
