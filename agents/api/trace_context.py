"""The W3C trace context an API request brings (https://www.w3.org/TR/trace-context/): its
``traceparent`` header, and ``tracestate`` with it. Both API ways of sending a message (the
OpenAI-compatible endpoint and the REST send) hand it to ``turn_send``, whose trace keeps it in
``meta``, so the turn's spans join the caller's trace. A header that is not valid is ignored,
never an error, as the recommendation says."""

from __future__ import annotations

from django.http import HttpRequest

from agents.turns.services import trace_context_meta

TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"


def request_trace_context(request: HttpRequest) -> dict[str, str]:
    """``{"traceparent": …, "tracestate": …}`` of the request as ``turn_send`` takes them:
    the valid ones only (``trace_context_meta``); empty without a valid ``traceparent``."""
    return trace_context_meta(request.headers.get(TRACEPARENT_HEADER, ""),
                              request.headers.get(TRACESTATE_HEADER, ""))
