"""The tool-call loop: ``run_turn`` answers one user message, running tools as the model asks.

One iteration: budget hook, compaction check, one model request (streamed, cancellable, under a
step timeout), then the requested tools -- deduplicated, approved, run in parallel when allowed,
results kept in call order, every output scrubbed of credentials and truncated -- then loop
detection and a trajectory state. The turn ends with a final answer, on cancellation, on a
failure, or after ``max_tool_iterations`` with one last request, without tools, for a summary.

Everything that happens is reported to the ``Observer``; nothing is persisted here. The result
carries the messages to store (the user's raw text; the time stamp is only sent to the model)
and the full history for the next turn.
"""

from __future__ import annotations

from ..messages import close_dangling_tool_uses
from .approvals import DENIED_OUTPUT, ApprovalDecision, ApprovalRequest, Approver
from .detector import LoopDetector, call_signature
from .turn import (
    DEFAULT_MAX_TOOL_ITERATIONS,
    DUPLICATE_OUTPUT,
    EXHAUSTED_ERROR,
    EXHAUSTION_PROMPT,
    LOOP_ABORT_ERROR,
    PARSE_EXCERPT_CHARS,
    PREVIEW_CHARS,
    SERIAL_TOOLS,
    STEP_TIMEOUT_ERROR,
    STREAM_INCOMPLETE,
    estimate_request_usage,
    run_turn,
)
from .types import (
    CANCELLED_OUTPUT,
    INTERRUPTED_OUTPUT,
    CompactionInfo,
    CompactionSettings,
    LlmCall,
    LlmCallDecision,
    TurnConfig,
    TurnHooks,
    TurnResult,
    TurnStatus,
)

__all__ = [
    "CANCELLED_OUTPUT",
    "DEFAULT_MAX_TOOL_ITERATIONS",
    "DENIED_OUTPUT",
    "DUPLICATE_OUTPUT",
    "EXHAUSTED_ERROR",
    "EXHAUSTION_PROMPT",
    "INTERRUPTED_OUTPUT",
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
    "TurnConfig",
    "TurnHooks",
    "TurnResult",
    "TurnStatus",
    "call_signature",
    "close_dangling_tool_uses",
    "estimate_request_usage",
    "run_turn",
]
