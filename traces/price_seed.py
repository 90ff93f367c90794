"""The global price table shipped with agentsite: list prices of common OpenAI, Anthropic and
Google models, in USD per million tokens, each with its source and the date it is in force from.

Where the numbers come from: each provider's public pricing page (``source_url``), at the list
price in force from ``effective_from``. Cache columns: OpenAI bills cached input at the "cached
input" rate and has no cache-write charge (empty = the input rate); Anthropic's cache write is
the 5-minute write rate (1.25x input) and its cache read the "cache hits" rate (0.1x); Google's
cache read is the context-caching rate (cache storage per hour is not a token price and is not
counted). Prices that depend on the prompt's length (Gemini 2.5 Pro and Claude Sonnet 4/4.5
above 200k input tokens) are the lower tier; longer prompts cost more than shown. Prices
change: site admins update the table in the admin (a new version per change) or import a JSON
export, and check the sources before relying on a figure.

The table is written by migration 0004 and, when the global table is empty after a migrate (a
fresh or flushed database), again by ``TracesConfig``'s ``post_migrate`` handler.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from .models import ModelPrice

OPENAI = "https://platform.openai.com/docs/pricing"
ANTHROPIC = "https://docs.anthropic.com/en/docs/about-claude/pricing"
GOOGLE = "https://ai.google.dev/gemini-api/docs/pricing"
LONG_PROMPTS = " Prompts over 200k tokens cost more; not modelled."


def _row(vendor: str, model: str, rates: tuple[str, str, str | None, str | None], since: str,
         source: str, *, aliases: tuple[str, ...] = (), note: str = "", provider_kind: str = "",
         label: str = "") -> dict[str, Any]:
    inp, out, write, read = rates
    return {
        "provider_kind": provider_kind, "vendor": vendor, "model": model, "aliases": list(aliases),
        "input_per_mtok": Decimal(inp), "output_per_mtok": Decimal(out),
        "cache_write_per_mtok": Decimal(write) if write is not None else None,
        "cache_read_per_mtok": Decimal(read) if read is not None else None,
        "effective_from": datetime.fromisoformat(since).replace(tzinfo=UTC),
        "source_url": source, "label": label,
        "source_note": f"List price in force from {since}.{note}"[:200],
    }


SEED_PRICES: list[dict[str, Any]] = [
    # OpenAI: input, output, (no cache-write charge), cached input.
    _row("openai", "gpt-5", ("1.25", "10", None, "0.125"), "2025-08-07", OPENAI),
    _row("openai", "gpt-5-mini", ("0.25", "2", None, "0.025"), "2025-08-07", OPENAI),
    _row("openai", "gpt-5-nano", ("0.05", "0.40", None, "0.005"), "2025-08-07", OPENAI),
    _row("openai", "gpt-4.1", ("2", "8", None, "0.50"), "2025-04-14", OPENAI),
    _row("openai", "gpt-4.1-mini", ("0.40", "1.60", None, "0.10"), "2025-04-14", OPENAI),
    _row("openai", "gpt-4.1-nano", ("0.10", "0.40", None, "0.025"), "2025-04-14", OPENAI),
    _row("openai", "gpt-4o", ("2.50", "10", None, "1.25"), "2024-10-01", OPENAI),
    # The first gpt-4o snapshot kept its launch price: an exact row, so the prefix rule cannot
    # price it as today's gpt-4o.
    _row("openai", "gpt-4o-2024-05-13", ("5", "15", None, None), "2024-05-13", OPENAI),
    _row("openai", "gpt-4o-mini", ("0.15", "0.60", None, "0.075"), "2024-10-01", OPENAI),
    _row("openai", "o1", ("15", "60", None, "7.50"), "2024-12-17", OPENAI),
    _row("openai", "o3", ("2", "8", None, "0.50"), "2025-06-10", OPENAI),
    _row("openai", "o3-mini", ("1.10", "4.40", None, "0.55"), "2025-01-31", OPENAI),
    _row("openai", "o4-mini", ("1.10", "4.40", None, "0.275"), "2025-04-16", OPENAI),
    # Anthropic: input, output, 5-minute cache write, cache read.
    _row("anthropic", "claude-opus-4-5", ("5", "25", "6.25", "0.50"), "2025-11-24", ANTHROPIC,
         aliases=("claude-opus-4.5",)),
    _row("anthropic", "claude-sonnet-4-5", ("3", "15", "3.75", "0.30"), "2025-09-29", ANTHROPIC,
         aliases=("claude-sonnet-4.5",), note=LONG_PROMPTS),
    _row("anthropic", "claude-haiku-4-5", ("1", "5", "1.25", "0.10"), "2025-10-15", ANTHROPIC,
         aliases=("claude-haiku-4.5",)),
    _row("anthropic", "claude-opus-4-1", ("15", "75", "18.75", "1.50"), "2025-08-05", ANTHROPIC,
         aliases=("claude-opus-4.1",)),
    _row("anthropic", "claude-opus-4", ("15", "75", "18.75", "1.50"), "2025-05-22", ANTHROPIC,
         aliases=("claude-opus-4-0",)),
    _row("anthropic", "claude-sonnet-4", ("3", "15", "3.75", "0.30"), "2025-05-22", ANTHROPIC,
         aliases=("claude-sonnet-4-0",), note=LONG_PROMPTS),
    _row("anthropic", "claude-3-7-sonnet", ("3", "15", "3.75", "0.30"), "2025-02-24", ANTHROPIC,
         aliases=("claude-3.7-sonnet",)),
    _row("anthropic", "claude-3-5-haiku", ("0.80", "4", "1", "0.08"), "2024-11-04", ANTHROPIC,
         aliases=("claude-3.5-haiku",)),
    _row("anthropic", "claude-3-5-sonnet", ("3", "15", "3.75", "0.30"), "2024-06-20", ANTHROPIC,
         aliases=("claude-3.5-sonnet",)),
    _row("anthropic", "claude-3-haiku", ("0.25", "1.25", "0.30", "0.03"), "2024-03-13", ANTHROPIC),
    _row("anthropic", "claude-3-opus", ("15", "75", "18.75", "1.50"), "2024-03-04", ANTHROPIC),
    # Google Gemini API: input, output, (cache creation billed as input), context-cache read.
    _row("google", "gemini-2.5-pro", ("1.25", "10", None, "0.125"), "2025-06-17", GOOGLE,
         note=LONG_PROMPTS),
    _row("google", "gemini-2.5-flash", ("0.30", "2.50", None, "0.03"), "2025-06-17", GOOGLE),
    _row("google", "gemini-2.5-flash-lite", ("0.10", "0.40", None, "0.01"), "2025-07-22", GOOGLE),
    _row("google", "gemini-2.0-flash", ("0.10", "0.40", None, "0.025"), "2025-02-05", GOOGLE),
    _row("google", "gemini-2.0-flash-lite", ("0.075", "0.30", None, None), "2025-02-25", GOOGLE),
    # The offline demo model runs locally: free, and said so, rather than "unpriced". Other
    # model names on the demo provider stay unpriced until a team prices them.
    {**_row("", "demo", ("0", "0", "0", "0"), "2000-01-01", "", aliases=("demo-fast", "demo-careful"),
            provider_kind="demo", label="free (offline demo)"),
     "source_note": "The offline demo model runs on this server and costs nothing."},
]


def price_seed_apply(model_price: Any, rows: list[dict[str, Any]] | None = None) -> int:
    """Add the shipped rows that the global table does not have yet (same kind, model and
    date); returns how many were added. ``model_price`` is the model class (a migration passes
    its historical one)."""
    added = 0
    for row in rows if rows is not None else SEED_PRICES:
        existing = model_price.objects.filter(team__isnull=True, provider_kind=row["provider_kind"],
                                              model=row["model"])
        if existing.filter(effective_from=row["effective_from"]).exists():
            continue
        version = max(existing.values_list("version", flat=True), default=0) + 1
        model_price.objects.create(team=None, version=version, **row)
        added += 1
    return added


def price_seed_if_empty(**kwargs: Any) -> None:
    """``post_migrate``: a database without any global price (fresh, or flushed by a test run)
    gets the shipped table."""

    if not ModelPrice.objects.filter(team__isnull=True).exists():
        price_seed_apply(ModelPrice)
