"""What the turn loop does after a context-overflow error, cheapest step first."""

from __future__ import annotations

from dataclasses import dataclass

from ..messages import Message
from .compaction import compact
from .trim import RECOVERY_KEEP_RECENT, emergency_history_trim, fast_trim_tool_results


@dataclass(frozen=True, slots=True)
class ContextRecovery:
    """What ``recover_context`` did: ``stage`` is ``"fast_trim"``, ``"compaction"``,
    ``"emergency_trim"`` or None when nothing could be removed."""

    stage: str | None
    bytes_saved: int = 0
    removed_message_count: int = 0
    summary: str = ""

    def __bool__(self) -> bool:
        return self.stage is not None


def recover_context(messages: list[Message], *, keep_recent: int = RECOVERY_KEEP_RECENT,
                    ) -> ContextRecovery:
    """After a context-overflow error: truncate old tool results; failing that, compact; failing
    that, drop the oldest third. Stops at the first step that frees something; changes
    ``messages`` in place."""
    saved = fast_trim_tool_results(messages, keep_recent)
    if saved:
        return ContextRecovery("fast_trim", bytes_saved=saved)
    result = compact(messages, preserve_recent=keep_recent, max_estimated_tokens=0)
    if result.removed_message_count:
        messages[:] = result.messages
        return ContextRecovery("compaction", removed_message_count=result.removed_message_count,
                               summary=result.summary)
    dropped = emergency_history_trim(messages, keep_recent)
    if dropped:
        return ContextRecovery("emergency_trim", removed_message_count=dropped)
    return ContextRecovery(None)
