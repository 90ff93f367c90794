"""The cancellation audit in the inspector: ``{% trace_audit trace as audit %}`` (None unless the
turn was cancelled, timed out or interrupted) and the clock time of its ISO moments."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from traces.debug.audit import AUDITED
from traces.debug.audit import trace_audit as build_audit
from traces.models import Trace

register = template.Library()


@register.simple_tag
def trace_audit(trace: Trace) -> dict[str, Any] | None:
    """What the stop of ``trace`` cut (``traces.debug.audit``); None for other statuses, without a
    query."""
    if getattr(trace, "status", None) not in AUDITED:
        return None
    return build_audit(trace)


@register.filter
def clock(value: Any) -> str:
    """An ISO moment as the local clock time with milliseconds: "18:54:32.013"."""
    if not value:
        return "—"
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return "—"
    if timezone.is_aware(moment):
        moment = timezone.localtime(moment)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
