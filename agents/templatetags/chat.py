from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from agents.chat.markdown import render_markdown

register = template.Library()


@register.filter
def markdown(value: str) -> SafeString:
    """Untrusted markdown (model output) as sanitised HTML (``agents.markdown``)."""
    return render_markdown(str(value or ""))
