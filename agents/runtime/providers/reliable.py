"""Retry, backoff and failover around providers (runtime_spec.md §10).

Order: the outer loop is the model chain ``[requested, *model_fallbacks[requested]]``, the middle
loop the providers (primary first), the inner loop attempts ``0..max_retries``. A retryable
error sleeps ``compute_backoff`` (500 ms doubling to 10 s; a Retry-After hint is honoured up to
30 s) and tries again; a permanent error (auth, unknown model, other 4xx) moves on to the next
provider or model at once.

What an error means (the classifiers) and how long to wait are ``retry_rules``; so is why a
context-window overflow is raised at once instead of truncated and retried.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..events import Retry
from ._redact import ERROR_DETAIL_LIMIT, sanitize_detail
from .base import (
    REQUEST_PARAMS,
    Capabilities,
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Provider,
    ProviderError,
    StreamDone,
    StreamEvent,
    StreamRestart,
    StreamText,
)
from .retry_rules import (
    compute_backoff,
    failure_reason,
    is_context_window_exceeded,
    is_non_retryable,
    is_non_retryable_rate_limit,
    is_rate_limited,
)

BASE_BACKOFF_MS = 500
MIN_BACKOFF_MS = 50
MAX_BACKOFF_MS = 10_000
DEFAULT_MAX_RETRIES = 2


OnRetry = Callable[[Retry], Awaitable[None]]
Sleep = Callable[[float], Awaitable[Any]]
Clock = Callable[[], float]

# An endpoint that could not be reached is skipped by later turns for this long.
COOL_DOWN_S = 30.0
_UNREACHABLE = (ErrorKind.NETWORK, ErrorKind.TIMEOUT)


class CoolDowns:
    """Endpoints that could not be reached lately, shared by the turns of one process: while
    one cools down, a turn tries its fallbacks first instead of waiting through its retries."""

    def __init__(self, seconds: float = COOL_DOWN_S, clock: Clock = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self._until: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()  # a worker may run turns on several threads

    def start(self, key: str, reason: str) -> None:
        with self._lock:
            self._until[key] = (self.clock() + self.seconds, reason)

    def clear(self, key: str) -> None:
        with self._lock:
            self._until.pop(key, None)

    def reset(self) -> None:
        with self._lock:
            self._until.clear()

    def cooling(self, key: str) -> str | None:
        """Why ``key`` is cooling down, or None when it is not (any more)."""
        with self._lock:
            entry = self._until.get(key)
            if entry is None:
                return None
            if entry[0] <= self.clock():
                del self._until[key]
                return None
            return entry[1]


COOL_DOWNS = CoolDowns()


def endpoint_key(provider: Provider) -> str:
    """What a provider talks to: its kind, base URL and name (the cool-down's key)."""
    return "|".join((provider.kind, str(getattr(provider, "base_url", "") or ""), provider.name))


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
    # The trace's failure lines keep the provider's words whole (up to the wire's own limit):
    # the cause is often named near the end of a long body.
    text = error.message if isinstance(error, ProviderError) else str(error)
    return sanitize_detail(text or type(error).__name__, limit=ERROR_DETAIL_LIMIT)


def _signature(error: Exception) -> tuple[int, str] | None:
    """What identifies a server error's answer: its status and the provider's words. Two equal
    signatures in a row mean the server answers this request the same way every time."""
    if not isinstance(error, ProviderError) or error.status is None or error.status < 500:
        return None
    said = error.detail or error.message
    return error.status, str(said)


@dataclass(frozen=True, slots=True)
class _Failure:
    """How one target failed, for the final sentence: a phrase after the provider's name, the
    same in a few words for a fallback, and what kind of advice fits."""

    phrase: str
    short: str
    advice: str  # "wait", "key", "model" or "check"


def _describe(error: Exception, model: str) -> _Failure:
    if not isinstance(error, ProviderError):
        verdict = _judge(error)
        if verdict.rate_limited:
            return _Failure("is rate limiting requests", "rate limited", "wait")
        if verdict.non_retryable:
            return _Failure("rejected the request", "request rejected", "check")
        return _Failure("failed", "error", "wait")
    status = f" ({error.status})" if error.status else ""
    kind = error.kind
    if kind == ErrorKind.NETWORK:
        return _Failure("could not be reached", "connection failed", "wait")
    if kind == ErrorKind.TIMEOUT:
        return _Failure("did not answer in time", "timed out", "wait")
    if kind == ErrorKind.RATE_LIMIT and error.retryable:
        return _Failure("is rate limiting requests", "rate limited", "wait")
    if kind == ErrorKind.RATE_LIMIT:
        return _Failure("refused the request for quota or billing reasons", "quota or billing",
                        "check")
    if kind == ErrorKind.AUTH:
        return _Failure(f"rejected its API key{status}", "API key rejected", "key")
    if kind == ErrorKind.MODEL_NOT_FOUND:
        return _Failure(f"does not know the model “{model}”", f"unknown model “{model}”", "model")
    if kind == ErrorKind.SERVER:
        return _Failure(f"had a server error{status}", f"server error{status}", "wait")
    if kind == ErrorKind.MALFORMED:
        return _Failure("sent an answer that broke off or could not be read",
                        "broken answer", "wait")
    if kind == ErrorKind.CONTEXT_OVERFLOW:
        return _Failure("found the conversation too long", "conversation too long", "check")
    advice = "wait" if error.retryable else "check"
    return _Failure(f"rejected the request{status}", f"request rejected{status}", advice)


_ADVICE = {
    "key": "Check the API keys of the providers in the admin.",
    "model": "Check the model names in the agent's settings.",
    "check": "Check the providers in the admin; the turn's trace has the details.",
    "wait": "Try again in a minute or check the providers in the admin.",
}


@dataclass(frozen=True, slots=True)
class _Decision:
    """What follows a failed attempt: another try at the same target after ``wait_ms``, or the
    next target of the plan (``following``, None when there is none)."""

    detail: str
    retryable: bool
    retry: bool = False
    wait_ms: int = 0
    following: _Attempt | None = None


ProviderSlot = Provider | tuple[Provider, str | None]


class ReliableProvider(Provider):
    """Retries and fails over across providers and models; is itself a ``Provider``.

    ``providers`` is the primary first, then the fallbacks. An entry may be ``(provider, model)``
    to pin that provider to its own model name (a fallback on another vendor rarely knows the
    primary's model names); pairs already tried are not tried again.

    One instance serves one turn: an endpoint that could not be reached (a connection error or
    a timeout, after its retries) is skipped by the turn's later requests, and by other turns
    while it cools down in ``cool_downs``. Skipping never empties the plan: when every target
    is to be skipped, each is tried anyway, with its retries. A cool-down only ever makes a
    turn try an alternative first."""

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
        cool_downs: CoolDowns | None = None,
        endpoint: Callable[[Provider], str] = endpoint_key,
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
        self.cool_downs = cool_downs if cool_downs is not None else COOL_DOWNS
        self.endpoint = endpoint
        # Endpoints that could not be reached in this turn -> why, in a few words.
        self.unreachable: dict[str, str] = {}
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

    @property
    def cache_min_tokens(self) -> int:
        return self.primary.cache_min_tokens

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
            if await run.skip(step):
                continue
            backoff = self.base_backoff_ms
            for attempt in range(run.attempts):
                try:
                    response = await target.provider.chat(replace(request, model=target.model))
                except Exception as error:  # noqa: BLE001 - every failure is classified below
                    decision = run.decide(step, attempt, error, backoff)
                    await run.report(step, attempt, decision)
                    if not decision.retry:
                        break
                    await self.sleep(decision.wait_ms / 1000.0)
                    backoff = min(backoff * 2, MAX_BACKOFF_MS)
                    continue
                run.succeeded(step)
                return _label(response, target)
        raise run.final_error()

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Before the first event a failure is retried or failed over quietly. After it, a
        retryable failure (a cut connection, a stream that never finished) voids what was
        streamed: a ``StreamRestart`` says so, with the text so far, and the answer starts
        over on the same target or the next one. A permanent failure after the first event,
        or one with nothing left to try, is raised with the text so far as ``partial_text``."""
        run = _Run(self, request)
        for step, target in enumerate(run.plan):
            if await run.skip(step):
                continue
            backoff = self.base_backoff_ms
            for attempt in range(run.attempts):
                events = target.provider.answer_events(replace(request, model=target.model))
                started = False
                shown: list[str] = []
                failure: Exception | None = None
                try:
                    async for event in events:
                        if isinstance(event, StreamText):
                            shown.append(event.text)
                        elif isinstance(event, StreamRestart):  # a nested wrapper started over
                            shown.clear()
                        elif isinstance(event, StreamDone):
                            _label(event.response, target)
                            run.succeeded(step)
                        started = True
                        yield event
                    return
                except Exception as error:  # noqa: BLE001 - every failure is classified below
                    failure = error
                finally:
                    closer = getattr(events, "aclose", None)
                    if closer is not None:
                        await closer()
                assert failure is not None  # the stream either returned or failed
                decision = run.decide(step, attempt, failure, backoff)
                if not started:
                    await run.report(step, attempt, decision)
                else:
                    partial = "".join(shown) or str(getattr(failure, "partial_text", "") or "")
                    following = target if decision.retry else decision.following
                    if not decision.retryable or following is None:
                        raise run.final_error(partial_text=partial)
                    yield StreamRestart(
                        reason=run.restart_reason(step, following), partial_text=partial,
                        provider=target.provider.name, model=target.model,
                        next_provider=following.provider.name, next_model=following.model)
                if not decision.retry:
                    break
                await self.sleep(decision.wait_ms / 1000.0)
                backoff = min(backoff * 2, MAX_BACKOFF_MS)
        raise run.final_error()

    async def aclose(self) -> None:
        for provider in self.providers:
            await provider.aclose()


def _is_slot(value: object) -> bool:
    if isinstance(value, Provider):
        return True
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Provider)
            and (value[1] is None or isinstance(value[1], str)))


def _unsent(request: ChatRequest, provider: Provider) -> str:
    """What a failover says of the request's parameters its next provider does not take: they
    are not sent, and the step says so rather than drop them unseen."""
    left = [name for name in request.sampling(frozenset(REQUEST_PARAMS))
            if name not in provider.request_params]
    if not left:
        return ""
    return f"; “{provider.name}” does not take {', '.join(left)}: sent without {'it' if len(left) == 1 else 'them'}"


def _label(response: ChatResponse, target: _Attempt) -> ChatResponse:
    # The trace shows which provider and model actually answered (a fallback, maybe).
    response.provider = response.provider or target.provider.name
    response.model = response.model or target.model
    return response


class _Run:
    """The bookkeeping of one request through the plan: the attempt log, how each target
    failed, the retry reports, and the final error."""

    def __init__(self, owner: ReliableProvider, request: ChatRequest) -> None:
        self.owner = owner
        self.request = request
        self.plan = owner.plan(request.model)
        self.failures: list[str] = []          # the attempt log, one line each
        self.outcomes: dict[int, _Failure] = {}  # step -> how its target failed, in plan order
        self.last_error: Exception | None = None
        self.previous: dict[int, tuple[int, str]] = {}  # step -> its last server error
        self.skips = self._skips()
        # Every target is to be skipped: none is, rather than fail unseen, and each gets its
        # full retries (another turn's failures must not take this turn's retries away).
        self.last_resort = len(self.skips) == len(self.plan)
        if self.last_resort:
            self.skips = {}
        self.attempts = owner.max_retries + 1

    def _key(self, step: int) -> str:
        return self.owner.endpoint(self.plan[step].provider)

    def _skips(self) -> dict[int, str]:
        owner, skips = self.owner, {}
        for step in range(len(self.plan)):
            key = self._key(step)
            if key in owner.unreachable:
                skips[step] = f"it could not be reached earlier in this turn ({owner.unreachable[key]})"
            elif (cooling := owner.cool_downs.cooling(key)) is not None:
                skips[step] = (f"it could not be reached in the last "
                               f"{owner.cool_downs.seconds:g} seconds ({cooling})")
        return skips

    def _following(self, step: int) -> _Attempt | None:
        for later in range(step + 1, len(self.plan)):
            if later not in self.skips:
                return self.plan[later]
        return None

    def _line(self, target: _Attempt, text: str) -> None:
        self.failures.append(f"provider={target.provider.name} model={target.model} {text}")

    async def skip(self, step: int) -> bool:
        """Skip the target of ``step`` when its endpoint was unreachable lately (reported)."""
        reason = self.skips.get(step)
        if reason is None:
            return False
        target = self.plan[step]
        self._line(target, f"skipped: {reason}")
        self.outcomes[step] = _Failure(f"was skipped because {reason}", "skipped, unreachable",
                                       "wait")
        following = self._following(step)
        await self._report(target, 0, f"Skipped: {reason}.", 0, following, skipped=True)
        return True

    def decide(self, step: int, attempt: int, error: Exception, backoff: int) -> _Decision:
        """Log a failure and decide what follows. A context overflow is raised at once."""
        owner, target = self.owner, self.plan[step]
        verdict = _judge(error)
        self.last_error = error
        detail = _detail(error)
        signature = _signature(error)
        repeated = signature is not None and self.previous.get(step) == signature
        if signature is not None:
            self.previous[step] = signature
        self._line(target, f"attempt {attempt + 1}/{self.attempts}: "
                           f"{failure_reason(verdict.rate_limited, verdict.non_retryable)}; "
                           f"error={detail}" + ("; the same answer again" if repeated else ""))
        if verdict.context_overflow:
            raise self._context_error(error)
        retryable = not verdict.non_retryable
        if retryable and not repeated and attempt + 1 < self.attempts:
            return _Decision(detail, retryable, retry=True,
                             wait_ms=compute_backoff(backoff, error))
        self.outcomes[step] = _describe(error, target.model)
        if isinstance(error, ProviderError) and error.kind in _UNREACHABLE:
            key, why = self._key(step), self.outcomes[step].short
            owner.unreachable[key] = why
            owner.cool_downs.start(key, why)
        return _Decision(detail, retryable, following=self._following(step))

    def succeeded(self, step: int) -> None:
        key = self._key(step)
        self.owner.unreachable.pop(key, None)
        self.owner.cool_downs.clear(key)

    async def report(self, step: int, attempt: int, decision: _Decision) -> None:
        target = self.plan[step]
        if decision.retry:
            await self._report(target, attempt + 1, decision.detail, decision.wait_ms)
        elif decision.following is not None:
            await self._report(target, attempt + 1,
                               decision.detail + _unsent(self.request, decision.following.provider),
                               0, decision.following)

    async def _report(self, target: _Attempt, attempt: int, detail: str, wait_ms: int,
                      following: _Attempt | None = None, *, skipped: bool = False) -> None:
        if self.owner.on_retry is None:
            return
        await self.owner.on_retry(Retry(
            provider=target.provider.name, model=target.model, attempt=attempt, error=detail,
            backoff_ms=float(wait_ms), failover=following is not None,
            next_provider=following.provider.name if following else "",
            next_model=following.model if following else "", skipped=skipped,
        ))

    def restart_reason(self, step: int, following: _Attempt) -> str:
        """One sentence for a stream that broke off and starts over on ``following``."""
        target = self.plan[step]
        why = _describe(self.last_error or Exception(), target.model).short
        where = ("" if following == target else
                 f" on “{following.provider.name}”" + (f" with “{following.model}”"
                                                       if following.model != target.model else ""))
        return f"The answer from “{target.provider.name}” broke off ({why}) and starts over{where}."

    def _context_error(self, error: Exception) -> ProviderError:
        if isinstance(error, ProviderError):
            return error
        return ProviderError(
            "The conversation is too long for the model's context window. Older messages "
            f"must be compacted or removed. Provider said: {_detail(error)}",
            retryable=False, kind=ErrorKind.CONTEXT_OVERFLOW, model=self.request.model)

    def sentence(self) -> str:
        """The failure in one plain sentence: what failed, what was tried, what to do."""
        described = [(self.plan[step], failure) for step, failure in self.outcomes.items()]
        if not described:  # cannot happen: every run tries or skips at least one target
            return "The model request failed. " + _ADVICE["check"]
        (first, failure), *rest = described

        def label(target: _Attempt) -> str:
            model = f" with “{target.model}”" if target.model != first.model else ""
            return f"“{target.provider.name}”{model}"

        text = f"The model provider {label(first)} {failure.phrase}"
        if len(rest) == 1:
            text += f"; the fallback {label(rest[0][0])} also failed ({rest[0][1].short})"
        elif rest:
            listed = [f"{label(t)} ({f.short})" for t, f in rest]
            text += f"; the fallbacks {', '.join(listed[:-1])} and {listed[-1]} also failed"
        advice = {f.advice for _, f in described}
        if len(advice) == 1 and advice <= {"key", "model"}:
            tip = _ADVICE[advice.pop()]
        else:
            tip = _ADVICE["wait" if "wait" in advice else "check"]
        return f"{text}. {tip}"

    def final_error(self, *, partial_text: str = "") -> ProviderError:
        last = self.last_error
        details = "\n".join(self.failures)
        if isinstance(last, ProviderError):
            return ProviderError(
                self.sentence(), retryable=last.retryable, kind=last.kind, status=last.status,
                retry_after=last.retry_after, provider=last.provider, model=last.model,
                details=details, partial_text=partial_text)
        return ProviderError(self.sentence(), retryable=not is_non_retryable(last or ""),
                             model=self.request.model, details=details,
                             partial_text=partial_text)
