"""The loop's public types: how a turn is configured and hooked into, and what it returns.

Also the few internals the steps share: the synthetic outputs for calls that never ran,
``EndTurn``, by which a step ends the turn without knowing how a result is assembled, and
``clip`` for the excerpts events carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..messages import Message, ToolResultBlock
from ..pricing import Usage
from ..providers.base import Provider
from ..trajectory import TrajectoryState

CANCELLED_OUTPUT = "Cancelled by user."
INTERRUPTED_OUTPUT = "The tool call was interrupted before a result was recorded."
# A call that was running when the turn's worker stopped, of a tool that may not be run twice.
RESUME_INTERRUPTED_OUTPUT = (
    "The tool call was interrupted: the worker running it stopped before it finished. It was "
    "not run again because running it twice may not be safe. Check whether it took effect "
    "before calling it again."
)


class TurnStatus(StrEnum):
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    MAX_ITERATIONS = "max_iterations"
    TIMED_OUT = "timed_out"


@dataclass(slots=True)
class CompactionSettings:
    enabled: bool = True
    preserve_recent: int = 4
    max_estimated_tokens: int = 10_000


@dataclass(slots=True)
class TurnConfig:
    model: str
    system_prompt: str = ""
    memory_context: str = ""  # a pre-built block, placed in the dynamic part of the system prompt
    # The last state of the previous turn: part of the dynamic system prompt when given.
    previous_trajectory_state: TrajectoryState | dict[str, Any] | None = None
    max_tool_iterations: int = 10
    parallel_tools: bool = True
    dispatcher: str = "auto"  # "auto" | "native" | "xml"
    temperature: float | None = None
    max_tokens: int | None = None
    # The request's other parameters a caller set for this turn (``ChatRequest`` fields among
    # ``providers.base.REQUEST_PARAMS``: top_p, stop, seed, penalties, response_format).
    request_params: dict[str, Any] = field(default_factory=dict)
    # The model's context window and the part of it kept for the answer: a request estimated
    # over the rest is shortened before it is sent (None: not checked).
    context_window: int | None = None
    answer_reserve: int = 0
    history_max_messages: int = 50  # 0: no cap
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    trajectory_states: bool = True
    inject_trajectory_state: bool = False  # this turn's latest state into the next request
    approval_timeout_s: float = 300.0
    step_timeout_s: float | None = 300.0
    tool_timeout_s: float | None = 120.0
    max_tool_output_chars: int = 50_000
    stream: bool = True
    timezone: str = "UTC"
    loop_detection: bool = True
    dedup_exempt_tools: frozenset[str] = frozenset()
    # The format the request asked the answer to have (a JSON object, a JSON schema): a check
    # of the final answer, its problem as a sentence or None, and, for a provider that is not
    # sent the format natively, the instructions that ask for it (a system block).
    answer_check: Callable[[str], str | None] | None = None
    answer_instructions: str = ""
    # (iteration, call id) -> the W3C ``traceparent`` a tool call carries to the services it
    # calls (``agents.runtime.tracecontext``); None, or a None answer: no trace context.
    traceparent_for: Callable[[int, str], str | None] | None = None
    # The caller's W3C ``tracestate``, sent on beside each call's ``traceparent``.
    tracestate: str = ""


@dataclass(frozen=True, slots=True)
class LlmCallDecision:
    """What ``TurnHooks.before_llm_call`` may decide: block the call with a reason the user
    reads, or send it (and the rest of the turn) to another model and/or provider."""

    block_reason: str | None = None
    provider: Provider | None = None
    model: str | None = None

    @classmethod
    def block(cls, reason: str) -> LlmCallDecision:
        return cls(block_reason=reason)

    @classmethod
    def route_down(cls, model: str, provider: Provider | None = None) -> LlmCallDecision:
        return cls(model=model, provider=provider)


@dataclass(frozen=True, slots=True)
class LlmCall:
    iteration: int
    provider: str
    model: str
    usage: Usage
    latency_ms: float
    success: bool
    error: str | None = None


class TurnHooks:
    """Optional, cheap hooks around model calls; subclass and override what you need."""

    async def before_llm_call(self, iteration: int, usage_so_far: Usage) -> LlmCallDecision | None:
        return None

    async def after_llm_call(self, call: LlmCall) -> None:
        return None

    async def before_tool_calls(self, iteration: int, usage_so_far: Usage,
                                names: list[str]) -> str | None:
        """A reason to end the turn before the model's tool calls run (their results would
        need a request that will not be made: running them would be side effects and cost for
        an answer that never comes); None to run them."""
        return None


@dataclass(slots=True)
class CompactionInfo:
    # "threshold", "context_overflow" (the provider refused it as too long) or
    # "context_window" (shortened before it was sent)
    reason: str
    removed_message_count: int
    summary: str = ""


@dataclass(slots=True)
class TurnResult:
    status: TurnStatus
    text: str = ""  # sanitized for display
    raw_text: str = ""
    error: str | None = None
    error_kind: str | None = None
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)
    llm_calls: list[LlmCall] = field(default_factory=list)
    new_messages: list[Message] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    trajectory_states: list[TrajectoryState] = field(default_factory=list)
    compactions: list[CompactionInfo] = field(default_factory=list)

    @property
    def usages(self) -> list[Usage]:
        return [c.usage for c in self.llm_calls]


@dataclass(slots=True)
class Resume:
    """Where a stored turn continues: after its worker died or handed it back (and, later, from
    any step of a stored trace). Built from the trace by the caller; the runtime never reads
    storage.

    ``messages`` are what the turn had added after the user's message, as recorded: assistant
    messages with their calls (ids kept) and the tool results that answered them.
    ``iteration`` is the iteration the last of them belongs to. When the last message is an
    assistant message whose calls are not all answered, those calls are settled first, in the
    same iteration: a call in ``recorded`` gets that result without running; a call in
    ``interrupted`` (it was running when the turn stopped) runs again only when its tool is
    ``idempotent``, otherwise it gets ``RESUME_INTERRUPTED_OUTPUT`` as an error result; any
    other call runs (it never started; one that needs approval is asked again). Then the loop
    goes on with the next iteration. When the last message is an assistant message without
    calls, the turn ends with it as the answer; when there are no messages, the turn starts
    with its first model request as usual.

    ``usage`` is what the recorded requests cost (budgets see the whole turn); ``state`` is the
    last trajectory state recorded, as a dict."""

    messages: list[Message] = field(default_factory=list)
    iteration: int = 0
    recorded: dict[str, ToolResultBlock] = field(default_factory=dict)
    interrupted: frozenset[str] = frozenset()
    usage: Usage = field(default_factory=Usage)
    state: dict[str, Any] | None = None


class EndTurn(Exception):  # noqa: N818 - control flow, not an error
    """Raised by a step to end the turn early; the turn answers open calls, reports the error
    and returns a result with this status."""

    def __init__(self, status: TurnStatus, message: str, kind: str, *, details: str = "") -> None:
        super().__init__(status)
        self.status = status
        self.message = message
        self.kind = kind
        self.details = details


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
