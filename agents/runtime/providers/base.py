"""The provider contract: a chat request in, an assistant message with usage out.

Every provider speaks ``ChatRequest``/``ChatResponse`` built on ``messages.Message`` and converts
to and from its own wire format. Errors cross this boundary only as ``ProviderError``, whose
``retryable`` flag and ``kind`` drive the reliable wrapper and the loop's recovery.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from ..messages import Message, ToolUseBlock
from ..pricing import Usage
from ..tools import ToolSpec


@dataclass(frozen=True, slots=True)
class Capabilities:
    native_tool_calling: bool = False
    vision: bool = False
    prompt_caching: bool = False
    streaming: bool = False

    def with_overrides(self, overrides: dict[str, Any] | None) -> Capabilities:
        """Configuration wins over what the provider kind declares; unknown keys are ignored."""
        if not overrides:
            return self
        known = {f.name for f in fields(Capabilities)}
        return replace(self, **{k: bool(v) for k, v in overrides.items() if k in known})

    def to_dict(self) -> dict[str, bool]:
        return {f.name: getattr(self, f.name) for f in fields(Capabilities)}


@dataclass(frozen=True, slots=True)
class SystemBlock:
    """One part of the system prompt. ``cacheable`` marks the static part, which providers with
    prompt caching send with a cache marker (Anthropic ``cache_control``)."""

    text: str
    cacheable: bool = False


# The per-request parameters beyond the conversation itself that a caller may set (the
# OpenAI-compatible API's request fields), as ``ChatRequest`` fields.
REQUEST_PARAMS = ("max_tokens", "temperature", "top_p", "stop", "seed", "presence_penalty",
                  "frequency_penalty", "response_format")


@dataclass(slots=True)
class ChatRequest:
    model: str
    messages: list[Message]
    system: list[SystemBlock] = field(default_factory=list)
    tools: list[ToolSpec] | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    # Sampling parameters a caller may set per request (``REQUEST_PARAMS``); None: the
    # provider's default. A provider sends on those its ``request_params`` names.
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    # OpenAI's ``response_format`` ({"type": "json_object"} or a ``json_schema``), sent natively.
    response_format: dict[str, Any] | None = None

    def sampling(self, names: frozenset[str]) -> dict[str, Any]:
        """The request's set parameters among ``names`` (a provider's ``request_params``)."""
        return {name: getattr(self, name) for name in REQUEST_PARAMS
                if name in names and getattr(self, name) is not None}

    @property
    def system_text(self) -> str:
        return "\n\n".join(b.text for b in self.system if b.text)


@dataclass(slots=True)
class ChatResponse:
    message: Message
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    provider: str = ""
    stop_reason: str | None = None
    # The provider's own payload (or, for a stream, its reassembly), kept for the trace.
    raw: Any = None
    # True when the server reported no usage and ``usage`` is the runtime's estimate.
    usage_estimated: bool = False

    @property
    def outcome(self) -> Outcome:
        """How the answer ended, in one vocabulary for every wire format (``stop_reason`` keeps
        the provider's own word)."""
        return outcome_of(self.stop_reason)

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def tool_calls(self) -> list[ToolUseBlock]:
        return self.message.tool_uses


class Outcome(StrEnum):
    """How a model's answer ended. Only ``COMPLETE`` and ``TOOL_USE`` are whole answers: a
    ``LENGTH`` answer was cut at the output limit, a ``REFUSAL`` was declined by the model, a
    ``FILTERED`` one was stopped by the provider's content filter."""

    COMPLETE = "complete"
    TOOL_USE = "tool_use"
    LENGTH = "length"
    REFUSAL = "refusal"
    FILTERED = "filtered"


_OUTCOMES = {
    "stop": Outcome.COMPLETE, "end_turn": Outcome.COMPLETE, "stop_sequence": Outcome.COMPLETE,
    "pause_turn": Outcome.COMPLETE, "eos": Outcome.COMPLETE,
    "tool_calls": Outcome.TOOL_USE, "function_call": Outcome.TOOL_USE,
    "tool_use": Outcome.TOOL_USE,
    "length": Outcome.LENGTH, "max_tokens": Outcome.LENGTH,
    "model_context_window_exceeded": Outcome.LENGTH,
    "refusal": Outcome.REFUSAL,
    "content_filter": Outcome.FILTERED,
}


def outcome_of(stop_reason: str | None) -> Outcome:
    """The ``Outcome`` of a provider's stop reason; an unknown or missing one counts as complete
    (a provider that finished without saying why)."""
    return _OUTCOMES.get((stop_reason or "").strip().lower(), Outcome.COMPLETE)


# -- streaming events -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StreamText:
    text: str


@dataclass(frozen=True, slots=True)
class StreamThinking:
    text: str


@dataclass(frozen=True, slots=True)
class StreamRestart:
    """The answer streamed so far is void: the stream broke off and the request is being sent
    again (to the same provider or a fallback), so the answer starts over. ``partial_text`` is
    what had been streamed, for the trace; ``reason`` the error, one plain sentence."""

    reason: str
    partial_text: str = ""
    provider: str = ""
    model: str = ""
    next_provider: str = ""
    next_model: str = ""


@dataclass(frozen=True, slots=True)
class StreamDone:
    response: ChatResponse


StreamEvent = StreamText | StreamThinking | StreamRestart | StreamDone


# -- errors -------------------------------------------------------------------------------------
class ErrorKind(StrEnum):
    RATE_LIMIT = "rate_limit"
    AUTH = "auth"
    CONTEXT_OVERFLOW = "context_overflow"
    MODEL_NOT_FOUND = "model_not_found"
    BAD_REQUEST = "bad_request"
    SERVER = "server"
    NETWORK = "network"
    TIMEOUT = "timeout"
    MALFORMED = "malformed_response"


class ProviderError(Exception):
    """A failed model request. ``retryable`` says whether the same request may succeed later;
    ``retry_after`` is the server's hint in seconds, when it gave one. ``message`` is what a
    person is shown. For the trace only: ``detail`` is the provider's own words about this
    failure (redacted, up to a few thousand characters) and ``details`` the log behind a
    failover's message (every attempt). ``partial_text`` is the answer text streamed before a
    stream failed, so a caller can keep it."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        kind: ErrorKind = ErrorKind.SERVER,
        status: int | None = None,
        retry_after: float | None = None,
        provider: str = "",
        model: str = "",
        detail: str = "",
        partial_text: str = "",
        details: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.partial_text = partial_text
        self.retryable = retryable
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.provider = provider
        self.model = model
        self.details = details

    @property
    def permanent(self) -> bool:
        return not self.retryable

    @property
    def trace_details(self) -> str:
        """What the trace keeps beside the message: the failover's log, else the provider's
        own words."""
        return self.details or self.detail

    def __repr__(self) -> str:
        return (f"ProviderError({self.message!r}, kind={self.kind!s}, status={self.status}, "
                f"retryable={self.retryable})")


# The key of ``Provider(capabilities=...)`` that holds overrides per model name.
PER_MODEL_OVERRIDES = "models"


class Provider(abc.ABC):
    """Base class. Subclasses set ``kind`` and ``default_capabilities`` and implement ``chat``;
    those that stream override ``stream``."""

    kind: str = ""
    default_capabilities: Capabilities = Capabilities()
    # The shortest prompt, in tokens, that the provider's prompt cache keeps (Anthropic's and
    # OpenAI's 1,024); the cache explainer counts nothing lost below it.
    cache_min_tokens: int = 1024
    # The ``REQUEST_PARAMS`` this kind sends on to its model; a caller's request setting
    # another is refused before the turn starts.
    request_params: frozenset[str] = frozenset({"max_tokens", "temperature"})

    def __init__(self, *, name: str = "", capabilities: dict[str, Any] | None = None) -> None:
        self.name = name or self.kind
        overrides = dict(capabilities or {})
        per_model = overrides.pop(PER_MODEL_OVERRIDES, None)
        self.capability_overrides: dict[str, Any] = overrides
        self.model_overrides: dict[str, dict[str, Any]] = {
            str(m).strip().lower(): dict(o) for m, o in per_model.items() if isinstance(o, dict)
        } if isinstance(per_model, dict) else {}
        self.capabilities = self.capabilities_for()

    def capabilities_for(self, model: str | dict[str, Any] | None = None) -> Capabilities:
        """What this provider can do for ``model``: the kind's defaults, then per-model rules
        (``model_capabilities``), then the configured overrides, then those configured for
        this model (``capabilities["models"][model]``; names compare without case). A dict
        argument is the older call form (explicit overrides on the kind's defaults) and is
        still accepted."""
        if isinstance(model, dict):
            return self.default_capabilities.with_overrides(model)
        configured = self.model_capabilities(model).with_overrides(self.capability_overrides)
        return configured.with_overrides(self.model_overrides.get((model or "").strip().lower()))

    def model_capabilities(self, model: str | None) -> Capabilities:
        """Per-model rules before configuration; subclasses refine by model name."""
        return self.default_capabilities

    def streaming_switched_off(self, model: str | None) -> bool:
        """Whether the configuration (for this model, else for the provider) turns streaming
        off: such a provider is sent whole requests even when the turn streams."""
        for overrides in (self.model_overrides.get((model or "").strip().lower()) or {},
                          self.capability_overrides):
            if "streaming" in overrides:
                return not overrides["streaming"]
        return False

    def answer_events(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """The answer to ``request`` as stream events: streamed, or one whole request when the
        configuration turns streaming off for its model."""
        if self.streaming_switched_off(request.model):
            return Provider.stream(self, request)
        return self.stream(request)

    @abc.abstractmethod
    async def chat(self, request: ChatRequest) -> ChatResponse: ...

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Default: one non-streaming request, reported as a single text event."""
        response = await self.chat(request)
        if response.text:
            yield StreamText(response.text)
        yield StreamDone(response)

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release pooled connections."""
