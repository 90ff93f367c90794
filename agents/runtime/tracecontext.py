"""The W3C trace context of the tool call running in the current task.

While a tool call and its hooks run, the loop (``tool_step``) sets ``TRACEPARENT`` to the
``traceparent`` that ``TurnConfig.traceparent_for`` gives the call (version ``00``: ``00-<trace
id>-<span id>-<flags>``, https://www.w3.org/TR/trace-context/), and ``TRACESTATE`` to the
caller's ``tracestate`` when the turn came with one (``TurnConfig.tracestate``, passed on
unchanged, as the recommendation lets a participant that adds no entry of its own), and resets
them when the call ends. A tool or hook that talks to another service reads them with
``current_trace_context()`` and sends them on (an HTTP tool and a webhook hook as headers, an
MCP tool in the request's ``params._meta``), so that service's spans join the turn's trace under
the call's span.

It is a ``contextvars.ContextVar``: every asyncio task sees the value of the task that created
it, so calls that run in parallel (a task each) each see their own, and a value set in one
call never leaks into another or outside the call. None outside a call, and when the turn
gives no ``traceparent_for``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

TRACEPARENT: ContextVar[str | None] = ContextVar("agentsite_traceparent", default=None)
TRACESTATE: ContextVar[str] = ContextVar("agentsite_tracestate", default="")


def current_traceparent() -> str | None:
    """The ``traceparent`` of the tool call running in this task, or None."""
    return TRACEPARENT.get()


def current_trace_context() -> dict[str, str]:
    """``{"traceparent": …, "tracestate": …}`` of the tool call running in this task (the
    ``tracestate`` only when there is one); empty outside a traced call."""
    traceparent = TRACEPARENT.get()
    if not traceparent:
        return {}
    tracestate = TRACESTATE.get()
    return {"traceparent": traceparent, "tracestate": tracestate} if tracestate else {
        "traceparent": traceparent}


@contextmanager
def traceparent_scope(value: str | None, tracestate: str = "") -> Iterator[None]:
    """``value`` as the current ``traceparent`` (and ``tracestate``) for the ``with`` block
    (None: no trace context inside it), the previous ones restored after it."""
    token = TRACEPARENT.set(value or None)
    state_token = TRACESTATE.set(tracestate if value else "")
    try:
        yield
    finally:
        TRACESTATE.reset(state_token)
        TRACEPARENT.reset(token)
