"""What a provider's failure means for a retry (ZeroClaw ``src/providers/reliable.rs``, checked
against its conformance vectors): the classifiers, the Retry-After hint, the backoff, and the
truncation of an overflowing context.

One deliberate difference from ZeroClaw: a context-window overflow is not truncated and retried
by the wrapper (``reliable``). It is raised at once as ``ProviderError(kind=CONTEXT_OVERFLOW)``
because compaction belongs to the loop, which can summarise instead of dropping messages.
``truncate_for_context`` is still provided (and checked against the conformance vectors) for
callers that want it.

The classifiers take an error string (or an exception: a ``ProviderError``'s status is used
first, as the original checks a typed HTTP status first).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableSequence
from decimal import Decimal, InvalidOperation
from typing import Any

from .base import ErrorKind, ProviderError

RETRY_AFTER_CAP_MS = 30_000
_U64_MAX = 2**64 - 1

_DIGIT_RUNS = re.compile(r"[0-9]+")

_AUTH_FAILURE_HINTS = (
    "invalid api key", "incorrect api key", "missing api key", "api key not set",
    "authentication failed", "auth failed", "unauthorized", "forbidden", "permission denied",
    "access denied", "invalid token",
)
_MODEL_FAILURE_HINTS = ("not found", "unknown", "unsupported", "does not exist", "invalid")
_CONTEXT_HINTS = (
    "exceeds the context window", "exceeds the available context size",
    "context window of this model", "maximum context length", "context length exceeded",
    "too many tokens", "token limit exceeded", "prompt is too long", "input is too long",
    "prompt exceeds max length",
    # Beyond the reference runtime's list: llama.cpp ("Requested tokens (5718) exceed context
    # window of 4096"), OpenAI's error code, vLLM and Anthropic's other wordings.
    "exceed context window", "exceeds context window", "context_length_exceeded",
    "context window exceeded", "model's context length", "maximum model length",
    "exceed context limit", "exceeds context limit",
)
_TOOL_SCHEMA_HINTS = (
    "tool call validation failed", "was not in request", "not found in tool list",
    "invalid_tool_call",
)
_BUSINESS_RATE_LIMIT_HINTS = (
    "plan does not include", "doesn't include", "not include", "insufficient balance",
    "insufficient_balance", "insufficient quota", "insufficient_quota", "quota exhausted",
    "out of credits", "no available package", "package not active", "purchase package",
    "model not available for your plan",
)
_AUTH_ERROR_HINTS = (
    "401 unauthorized", "403 forbidden", "invalid api key", "incorrect api key",
    "authentication failed", "auth failed", "unauthorized", "invalid token", "token expired",
    "access_token",
)
_RETRY_AFTER_PREFIXES = ("retry-after:", "retry_after:", "retry-after ", "retry_after ")
_RETRY_AFTER_NUMBER = re.compile(r"[0-9.]*")

ErrorLike = str | BaseException


# -- classifiers ------------------------------------------------------------------------------
def _text(error: ErrorLike) -> str:
    return error if isinstance(error, str) else str(error)


def _status(error: ErrorLike) -> int | None:
    return error.status if isinstance(error, ProviderError) else None


def _codes(text: str) -> list[int]:
    # The original parses each run of ASCII digits as a u16; longer numbers do not parse.
    return [int(run) for run in _DIGIT_RUNS.findall(text) if int(run) <= 0xFFFF]


def is_context_window_exceeded(error: ErrorLike) -> bool:
    if isinstance(error, ProviderError) and error.kind == ErrorKind.CONTEXT_OVERFLOW:
        return True
    lower = _text(error).lower()
    return any(hint in lower for hint in _CONTEXT_HINTS)


def is_tool_schema_error(error: ErrorLike) -> bool:
    lower = _text(error).lower()
    return any(hint in lower for hint in _TOOL_SCHEMA_HINTS)


def is_non_retryable(error: ErrorLike) -> bool:
    """A client error that retrying the same request cannot fix."""
    if is_context_window_exceeded(error) or is_tool_schema_error(error):
        return False
    status = _status(error)
    if status is not None:
        return 400 <= status < 500 and status not in (429, 408)
    text = _text(error)
    for code in _codes(text):
        if 400 <= code < 500:
            return code not in (429, 408)
    lower = text.lower()
    if any(hint in lower for hint in _AUTH_FAILURE_HINTS):
        return True
    return "model" in lower and any(hint in lower for hint in _MODEL_FAILURE_HINTS)


def is_rate_limited(error: ErrorLike) -> bool:
    status = _status(error)
    if status is not None:
        return status == 429
    text = _text(error)
    return "429" in text and ("Too Many" in text or "rate" in text or "limit" in text)


def is_non_retryable_rate_limit(error: ErrorLike) -> bool:
    """A 429 about the plan or the balance (not the request rate): waiting does not help."""
    if not is_rate_limited(error):
        return False
    lower = _text(error).lower()
    if any(hint in lower for hint in _BUSINESS_RATE_LIMIT_HINTS):
        return True
    return any(code in (1113, 1311) for code in _codes(lower))


def is_auth_error(error: ErrorLike) -> bool:
    if isinstance(error, ProviderError) and (error.kind == ErrorKind.AUTH
                                             or error.status in (401, 403)):
        return True
    lower = _text(error).lower()
    return any(hint in lower for hint in _AUTH_ERROR_HINTS)


def parse_retry_after_ms(error: ErrorLike) -> int | None:
    """Milliseconds from ``Retry-After: 5`` / ``retry_after: 2.5`` / ``Retry-After 7`` in the
    text (the first prefix that carries a number wins); a ``ProviderError``'s parsed header
    comes first."""
    if isinstance(error, ProviderError) and error.retry_after is not None:
        return max(int(error.retry_after * 1000), 0)
    lower = _text(error).lower()
    for prefix in _RETRY_AFTER_PREFIXES:
        pos = lower.find(prefix)
        if pos < 0:
            continue
        number = _RETRY_AFTER_NUMBER.match(lower[pos + len(prefix):].strip())
        try:
            seconds = Decimal(number.group(0) if number else "")
        except InvalidOperation:
            continue
        millis = int(seconds * 1000)
        if seconds.is_finite() and 0 <= millis <= _U64_MAX:
            return millis
    return None


def compute_backoff(base: int, error: ErrorLike) -> int:
    """Milliseconds to wait before the next attempt: the Retry-After hint capped at 30 s, but
    never less than the current backoff; the backoff itself when there is no hint."""
    retry_after = parse_retry_after_ms(error)
    if retry_after is None:
        return base
    return max(min(retry_after, RETRY_AFTER_CAP_MS), base)


def truncate_for_context(messages: MutableSequence[Any]) -> int:
    """Drop the oldest half of the non-system messages, in place; returns how many went.
    Nothing is dropped when at most one non-system message is left. Messages are dicts with a
    ``role`` key or objects with a ``role`` attribute."""
    non_system = [i for i, m in enumerate(messages) if _role(m) != "system"]
    if len(non_system) <= 1:
        return 0
    drop = len(non_system) // 2
    for index in reversed(non_system[:drop]):
        del messages[index]
    return drop


def _role(message: Any) -> str:
    role = message.get("role") if isinstance(message, Mapping) else getattr(message, "role", "")
    return str(role)


def failure_reason(rate_limited: bool, non_retryable: bool) -> str:
    if rate_limited and non_retryable:
        return "rate_limited_non_retryable"
    if rate_limited:
        return "rate_limited"
    return "non_retryable" if non_retryable else "retryable"
