from __future__ import annotations

from django import template
from django.urls import NoReverseMatch

from agentsite.links import link as _link

register = template.Library()


@register.simple_tag
def link(name: str, *args) -> str:
    """``{% url name arg ... %}`` for the links of rows, rendered many times on a page: the same
    address, without walking the URL patterns for each (``agentsite.links``)."""
    return _link(name, *args)


@register.simple_tag(takes_context=True)
def nav_item(context, url_name: str, label: str) -> dict:
    """A navigation entry: a link when the page exists, else a disabled item."""
    try:
        url = _link(url_name)
    except NoReverseMatch:
        return {"label": label, "url": "", "active": False}
    request = context.get("request")
    path = getattr(request, "path", "")
    active = path == url or (url != "/" and path.startswith(url))
    return {"label": label, "url": url, "active": active}


@register.filter
def tokens(value) -> str:
    """1234 -> "1.2k", 2500000 -> "2.5M"."""
    try:
        n = int(value or 0)
    except (TypeError, ValueError):
        return "0"
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k".replace(".0k", "k")
    return f"{n / 1_000_000:.1f}M".replace(".0M", "M")


@register.filter
def duration(value) -> str:
    """Milliseconds as "840 ms", "2.3 s", "4 min 05 s"."""
    if value in (None, ""):
        return "—"
    try:
        ms = float(value)
    except (TypeError, ValueError):
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest:02d} s"


@register.filter
def usd(value) -> str:
    """Dollars with enough digits to see small costs: $0.000123, $1.23."""
    if value in (None, ""):
        return "—"
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return "—"
    if amount == 0:
        return "$0"
    if abs(amount) < 0.01:
        return f"${amount:.6f}".rstrip("0")
    return f"${amount:,.4f}".rstrip("0").rstrip(".")


@register.filter
def short_uuid(value) -> str:
    return str(value)[:8]
