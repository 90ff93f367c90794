"""Everything a turn reports, as plain dataclasses sent to one ``Observer``.

The runtime never persists or broadcasts anything itself; the Django side implements
``Observer`` to write steps and announce them. ``kind`` is the stable wire name of each event.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol

from .pricing import Usage


@dataclass(kw_only=True, slots=True)
class Event:
    kind: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = self.kind
        return data


@dataclass(kw_only=True, slots=True)
class LlmRequestStarted(Event):
    kind: ClassVar[str] = "llm_request_started"
    iteration: int
    provider: str
    model: str
    messages_count: int
    tools_available: list[str] = field(default_factory=list)
    # The request as sent (provider-neutral: system, messages, tool specs), for the trace.
    request: dict[str, Any] = field(default_factory=dict)
    # The runtime's estimate of the request's input tokens, so that a request cut off before
    # it reported usage (a worker that died) can still be counted and priced.
    estimated_input_tokens: int = 0
    # The shortest prompt the provider's cache keeps (``Provider.cache_min_tokens``); None when
    # the provider does not cache prompts for this model.
    cache_min_tokens: int | None = None


@dataclass(kw_only=True, slots=True)
class LlmRequestFinished(Event):
    kind: ClassVar[str] = "llm_request_finished"
    iteration: int
    provider: str
    model: str
    success: bool
    usage: Usage = field(default_factory=Usage)
    # True when ``usage`` is (or includes) the runtime's estimate: the server reported none, a
    # stream was cut off by a cancel or a timeout, or an answer was restarted after part of it
    # had been streamed (and billed).
    usage_estimated: bool = False
    latency_ms: float = 0.0
    first_token_ms: float | None = None
    # When the stream's first chunk of any kind came (an answer of only tool calls has no text
    # token); None when the request did not stream.
    first_chunk_ms: float | None = None
    error: str | None = None
    stop_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    response: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True, slots=True)
class MessageAppended(Event):
    """An assistant message went into the turn's history, as ``Message.to_dict()``: the calls
    as parsed, with their ids. The record a stored turn is continued from (``Resume``)."""

    kind: ClassVar[str] = "message_appended"
    iteration: int
    message: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True, slots=True)
class TextDelta(Event):
    kind: ClassVar[str] = "text_delta"
    iteration: int
    text: str


@dataclass(kw_only=True, slots=True)
class LlmStreamRestarted(Event):
    """The answer being streamed broke off and starts over (on the same provider or a
    fallback): the text streamed so far is void. ``reason`` is one plain sentence."""

    kind: ClassVar[str] = "llm_stream_restarted"
    iteration: int
    reason: str
    partial_text: str = ""
    provider: str = ""
    model: str = ""
    next_provider: str = ""
    next_model: str = ""


@dataclass(kw_only=True, slots=True)
class ToolStarted(Event):
    kind: ClassVar[str] = "tool_started"
    iteration: int
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(kw_only=True, slots=True)
class ToolFinished(Event):
    kind: ClassVar[str] = "tool_finished"
    iteration: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    success: bool
    output: str
    duration_ms: float = 0.0
    error: str | None = None
    output_preview: str = ""
    # What the tool said about the call, for the trace (an MCP server's name, protocol …).
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True, slots=True)
class ToolPolicyDecided(Event):
    """Whether a call may run, and why: the tool's policy (allow / ask / deny, with where it
    came from) and the outcome after the before-hooks had their say."""

    kind: ClassVar[str] = "tool_policy"
    iteration: int
    call_id: str
    name: str
    policy: str  # "allow", "ask" or "deny"
    outcome: str  # "allow", "ask" or "deny"
    reason: str = ""
    source: str = ""  # "tool", "agent", "role floor", "hook"


@dataclass(kw_only=True, slots=True)
class HookRan(Event):
    """One hook's run: before or after a tool call, or around a message."""

    kind: ClassVar[str] = "hook"
    iteration: int
    event: str  # PreToolUse, PostToolUse, PostToolUseFailure, on_message_received, on_message_sending
    hook: str
    hook_kind: str  # "webhook" or "command"
    decision: str  # "allow", "warn", "deny", "failed", "cancelled", "rewrite", "drop", "suppress"
    call_id: str = ""
    tool: str = ""
    messages: list[str] = field(default_factory=list)
    duration_ms: float = 0.0
    detail: str = ""


@dataclass(kw_only=True, slots=True)
class ApprovalRequested(Event):
    kind: ClassVar[str] = "approval_requested"
    iteration: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    timeout_s: float


@dataclass(kw_only=True, slots=True)
class ApprovalDecided(Event):
    kind: ClassVar[str] = "approval_decided"
    iteration: int
    call_id: str
    name: str
    approved: bool
    reason: str = ""  # "approved", "denied", "timeout", "cancelled"
    waited_ms: float = 0.0


@dataclass(kw_only=True, slots=True)
class TrajectoryStateRecorded(Event):
    kind: ClassVar[str] = "trajectory_state"
    iteration: int
    state: dict[str, Any]
    changed: list[str] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class ToolCallParseIssue(Event):
    """The model wrote something that looks like a tool call but could not be read as one."""

    kind: ClassVar[str] = "tool_call_parse_issue"
    iteration: int
    issue: str
    excerpt: str = ""  # scrubbed, at most 600 chars


@dataclass(kw_only=True, slots=True)
class LoopDetected(Event):
    kind: ClassVar[str] = "loop_detected"
    iteration: int
    level: str  # "warning", "block" or "break"
    message: str
    tool: str = ""


@dataclass(kw_only=True, slots=True)
class Compacted(Event):
    kind: ClassVar[str] = "compaction"
    # "threshold", "context_overflow" (the provider refused it as too long) or
    # "context_window" (shortened before it was sent)
    reason: str
    removed_message_count: int
    summary: str = ""


@dataclass(kw_only=True, slots=True)
class Retry(Event):
    kind: ClassVar[str] = "retry"
    provider: str
    model: str
    attempt: int
    error: str
    backoff_ms: float = 0.0
    failover: bool = False
    next_provider: str = ""
    next_model: str = ""
    # The target was not tried: its endpoint could not be reached earlier (``error`` says so).
    skipped: bool = False


@dataclass(kw_only=True, slots=True)
class FinalAnswer(Event):
    kind: ClassVar[str] = "final_answer"
    text: str
    iterations: int
    usage: Usage = field(default_factory=Usage)


@dataclass(kw_only=True, slots=True)
class TurnError(Event):
    kind: ClassVar[str] = "error"
    message: str
    error_kind: str = "error"  # "cancelled", "timeout", "provider", "loop_detected", "budget", ...
    iteration: int = 0
    # What lies behind ``message`` (a failover's attempt log), for the trace; never shown in
    # the chat.
    details: str = ""


class Observer(Protocol):
    async def emit(self, event: Event) -> None: ...


class NullObserver:
    async def emit(self, event: Event) -> None:
        return None


class RecordingObserver:
    """Keeps every event in order; for tests and benchmarks."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def emit(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]
