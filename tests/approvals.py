"""Waiting for a running turn (in a thread or a worker) to ask for a tool call's approval."""

from __future__ import annotations

from tests.helpers import wait_for
from traces.models import Step, Trace


def waiting_approval(trace: Trace, *, what: str = "a tool call waiting for approval") -> Step:
    return wait_for(lambda: Step.objects.filter(trace=trace, kind="approval", status="waiting").first(),
                    what=what)
