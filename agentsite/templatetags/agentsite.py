from __future__ import annotations

from django import template
from django.urls import NoReverseMatch, reverse

register = template.Library()


@register.simple_tag(takes_context=True)
def nav_item(context, url_name: str, label: str) -> dict:
    """A navigation entry: a link when the page exists, else a disabled item."""
    try:
        url = reverse(url_name)
    except NoReverseMatch:
        return {"label": label, "url": "", "active": False}
    request = context.get("request")
    path = getattr(request, "path", "")
    active = path == url or (url != "/" and path.startswith(url))
    return {"label": label, "url": url, "active": active}
