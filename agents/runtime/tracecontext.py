"""The W3C trace context of the tool call running in the current task.

While a tool call runs, the loop (``tool_step``) sets ``TRACEPARENT`` to the ``traceparent``
that ``TurnConfig.traceparent_for`` gives the call (version ``00``: ``00-<trace id>-<span
id>-<flags>``, https://www.w3.org/TR/trace-context/), and resets it when the call ends. A
tool that talks to another service reads it with ``current_traceparent()`` and sends it on (an
HTTP tool as the ``traceparent`` header, an MCP tool in the request's ``params._meta``), so
that service's spans join the turn's trace under the call's span.

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


def current_traceparent() -> str | None:
    """The ``traceparent`` of the tool call running in this task, or None."""
    return TRACEPARENT.get()


@contextmanager
def traceparent_scope(value: str | None) -> Iterator[None]:
    """``value`` as the current ``traceparent`` for the ``with`` block (None: no trace context
    inside it), the previous one restored after it."""
    token = TRACEPARENT.set(value or None)
    try:
        yield
    finally:
        TRACEPARENT.reset(token)
