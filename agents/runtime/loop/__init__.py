"""The tool-call loop: ``run_turn`` answers one user message, running tools as the model asks.

One iteration: budget hook, compaction check, one model request (streamed, cancellable, under a
step timeout), then the requested tools -- deduplicated, approved, run in parallel when allowed,
results kept in call order, every output scrubbed of credentials and truncated -- then loop
detection and a trajectory state. The turn ends with a final answer, on cancellation, on a
failure, or after ``max_tool_iterations`` with one last request, without tools, for a summary.

Everything that happens is reported to the ``Observer``; nothing is persisted here. The result
carries the messages to store (the user's raw text; the time stamp is only sent to the model)
and the full history for the next turn.

Where things are:

* ``types``         -- ``TurnConfig``, ``TurnHooks``, ``TurnResult`` and the other public types
* ``turn``          -- ``Turn``: the iterations, trajectory states and every way a turn ends
* ``model_step``    -- one model request: hooks, streaming, timeouts, usage, parsing
* ``tool_step``     -- the calls of one response: duplicates, parallel or serial, cancellation
* ``approvals``     -- asking the ``Approver`` before a tool whose policy is "ask" runs
* ``detector``      -- ``LoopDetector`` and what makes two calls the same
* ``conversation``  -- history, messages to store, wire messages, compaction
* ``prompt``        -- the system prompt of each request
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from ..cancel import CancelToken
from ..events import NullObserver, Observer
from ..hooks import ToolHooks
from ..messages import ImageBlock, Message, close_dangling_tool_uses
from ..providers.base import Provider
from ..tools import Tool
from .approvals import DENIED_OUTPUT, ApprovalDecision, ApprovalRequest, Approver
from .detector import LoopDetector, call_signature
from .model_step import (
    PARSE_EXCERPT_CHARS,
    STEP_TIMEOUT_ERROR,
    STREAM_INCOMPLETE,
    estimate_request_usage,
)
from .tool_step import DUPLICATE_OUTPUT, PREVIEW_CHARS, SERIAL_TOOLS
from .turn import (
    DEFAULT_MAX_TOOL_ITERATIONS,
    EXHAUSTED_ERROR,
    EXHAUSTION_PROMPT,
    LOOP_ABORT_ERROR,
    Turn,
    utc_now,
)
from .types import (
    CANCELLED_OUTPUT,
    INTERRUPTED_OUTPUT,
    RESUME_INTERRUPTED_OUTPUT,
    CompactionInfo,
    CompactionSettings,
    LlmCall,
    LlmCallDecision,
    Resume,
    TurnConfig,
    TurnHooks,
    TurnResult,
    TurnStatus,
)


async def run_turn(
    *,
    provider: Provider,
    config: TurnConfig,
    history: list[Message],
    user_message: str,
    tools: list[Tool],
    observer: Observer | None = None,
    cancel: CancelToken | None = None,
    approver: Approver | None = None,
    hooks: TurnHooks | None = None,
    clock: Callable[[], datetime] = utc_now,
    resume: Resume | None = None,
    user_images: Sequence[ImageBlock] = (),
    tool_hooks: ToolHooks | None = None,
) -> TurnResult:
    """Run one turn. Never raises for provider, tool or approval failures, cancellation or
    timeouts: they end the turn with the matching ``TurnResult.status``. ``history`` is not
    modified; ``TurnResult.history`` is the history for the next turn. ``resume`` continues a
    stored turn from where its record ends (``Resume``); the messages it holds are not reported
    again, and ``TurnResult.new_messages`` holds them with the rest."""
    turn = Turn(provider=provider, config=config, history=history, user_message=user_message,
                tools=tools, observer=observer or NullObserver(), cancel=cancel,
                approver=approver, hooks=hooks, clock=clock, resume=resume,
                user_images=user_images, tool_hooks=tool_hooks)
    return await turn.run()


__all__ = [
    "CANCELLED_OUTPUT",
    "DEFAULT_MAX_TOOL_ITERATIONS",
    "DENIED_OUTPUT",
    "DUPLICATE_OUTPUT",
    "EXHAUSTED_ERROR",
    "EXHAUSTION_PROMPT",
    "INTERRUPTED_OUTPUT",
    "RESUME_INTERRUPTED_OUTPUT",
    "LOOP_ABORT_ERROR",
    "PARSE_EXCERPT_CHARS",
    "PREVIEW_CHARS",
    "SERIAL_TOOLS",
    "STEP_TIMEOUT_ERROR",
    "STREAM_INCOMPLETE",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "CompactionInfo",
    "CompactionSettings",
    "LlmCall",
    "LlmCallDecision",
    "LoopDetector",
    "Resume",
    "TurnConfig",
    "TurnHooks",
    "TurnResult",
    "TurnStatus",
    "call_signature",
    "close_dangling_tool_uses",
    "estimate_request_usage",
    "run_turn",
]
