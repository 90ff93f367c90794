from __future__ import annotations

from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django import template

register = template.Library()


@register.filter
def percent(value: Any) -> str:
    """0.4231 -> "42%"; None -> "—"."""
    if value is None or value == "":
        return "—"
    try:
        return f"{float(value) * 100:.0f}%"
    except (TypeError, ValueError):
        return "—"


@register.filter
def usd_full(value: Any) -> str:
    """Every digit a cost is kept with: $0.0000123400 -> "$0.00001234"."""
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return "—"
    if not amount:
        return "$0"
    sign = "−" if amount < 0 else ""
    text = f"{abs(amount):.10f}".rstrip("0").rstrip(".")
    return f"{sign}${text}"


@register.filter
def signed_usd(value: Any) -> str:
    """A difference: "+$0.0012", "−$0.5", "$0"."""
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return "—"
    if not amount:
        return "$0"
    return ("+" if amount > 0 else "") + usd_full(amount)


@register.filter
def add_days(value: Any, days: Any) -> Any:
    """A date moved by ``days`` (negative: earlier)."""

    try:
        return value + timedelta(days=int(days))
    except (TypeError, ValueError):
        return value
