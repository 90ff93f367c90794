"""``{% visible_forks trace as forks %}``: the forks of a trace the page's viewer may see."""

from __future__ import annotations

from typing import Any

from django import template

from traces.models import Trace
from traces.record.selectors import traces_visible

register = template.Library()
MAX_FORKS_LISTED = 20


@register.simple_tag(takes_context=True)
def visible_forks(context: Any, trace: Trace) -> list[Trace]:
    request = context.get("request")
    membership = getattr(request, "membership", None)
    if membership is None or not trace.pk or getattr(trace, "has_forks", True) is False:
        return []
    return list(traces_visible(membership, Trace.objects.filter(forked_from_id=trace.pk))
                .order_by("id").only("uuid", "fork_seq", "status")[:MAX_FORKS_LISTED])
