"""Retry, backoff and failover around providers (runtime_spec.md §10).

Order: the outer loop is the model chain ``[requested, *model_fallbacks[requested]]``, the middle
loop the providers (primary first), the inner loop attempts ``0..max_retries``. A retryable
error sleeps ``compute_backoff`` (500 ms doubling to 10 s; a Retry-After hint is honoured up to
30 s) and tries again; a permanent error (auth, unknown model, other 4xx) moves on to the next
provider or model at once.

One deliberate difference from ZeroClaw: a context-window overflow is not truncated and retried
here. It is raised at once as ``ProviderError(kind=CONTEXT_OVERFLOW)`` because compaction
belongs to the loop, which can summarise instead of dropping messages. ``truncate_for_context``
is still provided (and checked against the conformance vectors) for callers that want it.

The classifiers below take an error string (or an exception: a ``ProviderError``'s status is
used first, as the original checks a typed HTTP status first).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableSequence, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from ..events import Retry
from ._redact import sanitize_detail
from .base import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Provider,
    ProviderError,
    StreamDone,
    StreamEvent,
)

BASE_BACKOFF_MS = 500
MIN_BACKOFF_MS = 50
MAX_BACKOFF_MS = 10_000
RETRY_AFTER_CAP_MS = 30_000
DEFAULT_MAX_RETRIES = 2
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


# -- the wrapper ------------------------------------------------------------------------------
OnRetry = Callable[[Retry], Awaitable[None]]
Sleep = Callable[[float], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class _Attempt:
    """One (provider, model) pair of the plan."""

    provider: Provider
    model: str


@dataclass(frozen=True, slots=True)
class _Verdict:
    non_retryable: bool
    rate_limited: bool
    context_overflow: bool


def _judge(error: Exception) -> _Verdict:
    if isinstance(error, ProviderError):
        return _Verdict(
            non_retryable=not error.retryable,
            rate_limited=error.kind == ErrorKind.RATE_LIMIT or error.status == 429,
            context_overflow=error.kind == ErrorKind.CONTEXT_OVERFLOW,
        )
    # An exception from a provider outside this package: classify its text.
    return _Verdict(
        non_retryable=is_non_retryable(error) or is_non_retryable_rate_limit(error),
        rate_limited=is_rate_limited(error),
        context_overflow=is_context_window_exceeded(error),
    )


def _detail(error: Exception) -> str:
    text = error.message if isinstance(error, ProviderError) else str(error)
    return sanitize_detail(text or type(error).__name__)


ProviderSlot = Provider | tuple[Provider, str | None]


class ReliableProvider(Provider):
    """Retries and fails over across providers and models; is itself a ``Provider``.

    ``providers`` is the primary first, then the fallbacks. An entry may be ``(provider, model)``
    to pin that provider to its own model name (a fallback on another vendor rarely knows the
    primary's model names); pairs already tried are not tried again."""

    kind = "reliable"

    def __init__(
        self,
        providers: ProviderSlot | Sequence[ProviderSlot],
        *,
        model_fallbacks: Mapping[str, Sequence[str]] | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        base_backoff_ms: int = BASE_BACKOFF_MS,
        on_retry: OnRetry | None = None,
        sleep: Sleep = asyncio.sleep,
        name: str = "",
    ) -> None:
        slots = [providers] if _is_slot(providers) else list(providers)  # type: ignore[arg-type]
        if not slots:
            raise ValueError("ReliableProvider needs at least one provider")
        self.slots: list[tuple[Provider, str | None]] = [
            slot if isinstance(slot, tuple) else (slot, None) for slot in slots
        ]
        self.model_fallbacks = {k: list(v) for k, v in (model_fallbacks or {}).items()}
        self.max_retries = max(int(max_retries), 0)
        self.base_backoff_ms = max(int(base_backoff_ms), MIN_BACKOFF_MS)
        self.on_retry = on_retry
        self.sleep = sleep
        super().__init__(name=name or self.primary.name)

    def __repr__(self) -> str:
        names = ", ".join(p.name for p, _ in self.slots)
        return f"ReliableProvider([{names}], max_retries={self.max_retries})"

    @property
    def primary(self) -> Provider:
        return self.slots[0][0]

    @property
    def providers(self) -> list[Provider]:
        return [p for p, _ in self.slots]

    def capabilities_for(self, model: str | dict[str, Any] | None = None) -> Capabilities:
        return self.primary.capabilities_for(model)

    def model_chain(self, model: str) -> list[str]:
        return [model, *self.model_fallbacks.get(model, [])]

    def plan(self, model: str) -> list[_Attempt]:
        attempts: list[_Attempt] = []
        seen: set[tuple[int, str]] = set()
        for current in self.model_chain(model):
            for provider, pinned in self.slots:
                chosen = pinned or current
                if (id(provider), chosen) not in seen:
                    seen.add((id(provider), chosen))
                    attempts.append(_Attempt(provider, chosen))
        return attempts

    async def chat(self, request: ChatRequest) -> ChatResponse:
        run = _Run(self, request)
        for step, target in enumerate(run.plan):
            backoff = self.base_backoff_ms
            for attempt in range(self.max_retries + 1):
                try:
                    response = await target.provider.chat(replace(request, model=target.model))
                except Exception as error:  # noqa: BLE001 - every failure is classified below
                    backoff = await run.failed(step, attempt, error, backoff)
                    if backoff < 0:
                        break
                    continue
                return _label(response, target)
        raise run.final_error()

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Retries and failover happen only before the first event; after that an error
        propagates, since the consumer has already shown part of an answer."""
        run = _Run(self, request)
        for step, target in enumerate(run.plan):
            backoff = self.base_backoff_ms
            for attempt in range(self.max_retries + 1):
                events = target.provider.stream(replace(request, model=target.model))
                started = False
                try:
                    async for event in events:
                        started = True
                        if isinstance(event, StreamDone):
                            _label(event.response, target)
                        yield event
                    return
                except Exception as error:
                    if started:
                        raise
                    backoff = await run.failed(step, attempt, error, backoff)
                    if backoff < 0:
                        break
                finally:
                    closer = getattr(events, "aclose", None)
                    if closer is not None:
                        await closer()
        raise run.final_error()

    async def aclose(self) -> None:
        for provider in self.providers:
            await provider.aclose()


def _is_slot(value: object) -> bool:
    if isinstance(value, Provider):
        return True
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Provider)
            and (value[1] is None or isinstance(value[1], str)))


def _label(response: ChatResponse, target: _Attempt) -> ChatResponse:
    # The trace shows which provider and model actually answered (a fallback, maybe).
    response.provider = response.provider or target.provider.name
    response.model = response.model or target.model
    return response


class _Run:
    """The bookkeeping of one request through the plan: failure lines and retry reports."""

    def __init__(self, owner: ReliableProvider, request: ChatRequest) -> None:
        self.owner = owner
        self.request = request
        self.plan = owner.plan(request.model)
        self.failures: list[str] = []
        self.last_error: Exception | None = None

    async def failed(self, step: int, attempt: int, error: Exception, backoff: int) -> int:
        """Record a failure and wait when a retry follows; the next backoff, or -1 to move on
        to the next provider/model."""
        owner, target = self.owner, self.plan[step]
        verdict = _judge(error)
        self.last_error = error
        detail = _detail(error)
        self.failures.append(
            f"provider={target.provider.name} model={target.model} attempt "
            f"{attempt + 1}/{owner.max_retries + 1}: "
            f"{failure_reason(verdict.rate_limited, verdict.non_retryable)}; error={detail}"
        )
        if verdict.context_overflow:
            raise self._context_error(error)
        if not verdict.non_retryable and attempt < owner.max_retries:
            wait = compute_backoff(backoff, error)
            await self._report(target, attempt + 1, detail, wait)
            await owner.sleep(wait / 1000.0)
            return min(backoff * 2, MAX_BACKOFF_MS)
        following = self.plan[step + 1] if step + 1 < len(self.plan) else None
        if following is not None:
            await self._report(target, attempt + 1, detail, 0, following)
        return -1

    async def _report(self, target: _Attempt, attempt: int, detail: str, wait_ms: int,
                      following: _Attempt | None = None) -> None:
        if self.owner.on_retry is None:
            return
        await self.owner.on_retry(Retry(
            provider=target.provider.name, model=target.model, attempt=attempt, error=detail,
            backoff_ms=float(wait_ms), failover=following is not None,
            next_provider=following.provider.name if following else "",
            next_model=following.model if following else "",
        ))

    def _context_error(self, error: Exception) -> ProviderError:
        if isinstance(error, ProviderError):
            return error
        return ProviderError(
            "The conversation is too long for the model's context window. Older messages "
            f"must be compacted or removed. Provider said: {_detail(error)}",
            retryable=False, kind=ErrorKind.CONTEXT_OVERFLOW, model=self.request.model)

    def final_error(self) -> ProviderError:
        last = self.last_error
        lines = "\n".join(self.failures)
        if isinstance(last, ProviderError):
            return ProviderError(
                f"All providers/models failed. Attempts:\n{lines}", retryable=last.retryable,
                kind=last.kind, status=last.status, retry_after=last.retry_after,
                provider=last.provider, model=last.model)
        return ProviderError(f"All providers/models failed. Attempts:\n{lines}",
                             retryable=not is_non_retryable(last or ""),
                             model=self.request.model)
