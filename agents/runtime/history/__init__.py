"""Keeping a conversation inside the model's context window: trimming, truncation, compaction.

Two families of rules, both applied to the runtime's content-block ``Message`` history:

* ``trim`` — ZeroClaw's trimming: a message cap that keeps the system prompt, head+tail
  truncation of large tool results, and the drop-the-oldest steps, never leaving a tool result
  without its tool call;
* ``compaction`` — Claw Code's compaction: older messages summarised into one system message.

``tokens`` estimates a history's size; ``recovery`` chains the cheapest steps of both families
after a context-overflow error; ``shapes`` reads either history shape (``Message`` or dict).
"""

from __future__ import annotations

from .compaction import (
    COMPACT_CONTINUATION_PREAMBLE,
    COMPACT_DIRECT_RESUME_INSTRUCTION,
    COMPACT_RECENT_MESSAGES_NOTE,
    DEFAULT_COMPACTION_MAX_TOKENS,
    DEFAULT_PRESERVE_RECENT,
    CompactionResult,
    collect_key_files,
    collect_recent_role_summaries,
    compact,
    compactable_size,
    extract_existing_compacted_summary,
    extract_summary_highlights,
    extract_summary_timeline,
    first_text_block,
    format_compact_summary,
    get_compact_continuation_message,
    infer_current_work,
    infer_pending_work,
    is_compaction_summary,
    merge_compact_summaries,
    should_compact,
    summarize_block,
    summarize_messages,
    truncate_summary,
)
from .recovery import ContextRecovery, recover_context
from .shapes import H, tool_input_text
from .tokens import (
    estimate_message_tokens,
    estimate_tokens,
)
from .trim import (
    DEFAULT_MAX_HISTORY_MESSAGES,
    FAST_TRIM_MAX_BYTES,
    RECOVERY_KEEP_RECENT,
    emergency_history_trim,
    fast_trim_tool_results,
    remove_orphaned_tool_results,
    trim_history,
    truncate_tool_message,
    truncate_tool_result,
)

__all__ = [
    "COMPACT_CONTINUATION_PREAMBLE",
    "COMPACT_DIRECT_RESUME_INSTRUCTION",
    "COMPACT_RECENT_MESSAGES_NOTE",
    "DEFAULT_COMPACTION_MAX_TOKENS",
    "DEFAULT_MAX_HISTORY_MESSAGES",
    "DEFAULT_PRESERVE_RECENT",
    "FAST_TRIM_MAX_BYTES",
    "H",
    "RECOVERY_KEEP_RECENT",
    "CompactionResult",
    "ContextRecovery",
    "collect_key_files",
    "collect_recent_role_summaries",
    "compact",
    "compactable_size",
    "emergency_history_trim",
    "estimate_message_tokens",
    "estimate_tokens",
    "extract_existing_compacted_summary",
    "extract_summary_highlights",
    "extract_summary_timeline",
    "fast_trim_tool_results",
    "first_text_block",
    "format_compact_summary",
    "get_compact_continuation_message",
    "infer_current_work",
    "infer_pending_work",
    "is_compaction_summary",
    "merge_compact_summaries",
    "recover_context",
    "remove_orphaned_tool_results",
    "should_compact",
    "summarize_block",
    "summarize_messages",
    "tool_input_text",
    "trim_history",
    "truncate_summary",
    "truncate_tool_message",
    "truncate_tool_result",
]
