"""The ``[Memory context]`` block: recalled memories, filtered and capped, for the system prompt.

Follows ZeroClaw's channel builder: entries below the relevance threshold are dropped first
(entries without a score are kept), then entries that are noise or unsafe to re-inject are
skipped without counting, then at most four entries are written, each cut to 800 characters,
stopping before the block's lines would pass 4,000 characters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

MEMORY_CONTEXT_MAX_ENTRIES = 4
MEMORY_CONTEXT_ENTRY_MAX_CHARS = 800
MEMORY_CONTEXT_MAX_CHARS = 4000
DEFAULT_MIN_RELEVANCE = 0.4

_NOISE_PREFIXES = ("[cron:", "[heartbeat task", "[distilled_")


@dataclass(frozen=True, slots=True)
class MemoryItem:
    key: str
    content: str
    score: float | None = None
    category: str = "core"
    timestamp: datetime | str | None = None


def is_assistant_autosave_key(key: str) -> bool:
    normalized = key.strip().lower()
    return normalized == "assistant_resp" or normalized.startswith("assistant_resp_")


def is_autosave_noise(content: str) -> bool:
    """Synthetic entries (cron and heartbeat runs, distillation bookkeeping) and empty ones."""
    normalized = content.strip()
    if not normalized:
        return True
    lowered = normalized.lower()
    return lowered.startswith(_NOISE_PREFIXES) or "distilled_index_sig:" in lowered


def should_skip_memory_context_entry(key: str, content: str) -> bool:
    """Entries never shown to the model: the assistant's own saved replies, autosave noise,
    stored chat histories, image markers and tool results (re-injecting them would duplicate
    them), and anything over 4,000 characters."""
    return (
        is_assistant_autosave_key(key)
        or is_autosave_noise(content)
        or key.strip().lower().endswith("_history")
        or "[IMAGE:" in content
        or "<tool_result" in content
        or len(content) > MEMORY_CONTEXT_MAX_CHARS
    )


def truncate_with_ellipsis(text: str, max_chars: int) -> str:
    """The first ``max_chars`` characters, trailing whitespace trimmed, then ``...``."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rstrip() + "..."


def _relevant(item: MemoryItem, min_relevance: float | None) -> bool:
    return min_relevance is None or item.score is None or item.score >= min_relevance


def build_memory_context(items: Iterable[MemoryItem], *,
                         min_relevance: float | None = DEFAULT_MIN_RELEVANCE,
                         max_entries: int = MEMORY_CONTEXT_MAX_ENTRIES,
                         max_entry_chars: int = MEMORY_CONTEXT_ENTRY_MAX_CHARS,
                         max_total_chars: int = MEMORY_CONTEXT_MAX_CHARS) -> str:
    """``"[Memory context]\\n- {key}: {content}\\n…[/Memory context]\\n\\n"``, or ``""`` when no
    entry qualifies."""
    lines: list[str] = []
    used = 0
    for item in items:
        if len(lines) >= max_entries:
            break
        if not _relevant(item, min_relevance):
            continue
        if should_skip_memory_context_entry(item.key, item.content):
            continue
        line = f"- {item.key}: {truncate_with_ellipsis(item.content, max_entry_chars)}\n"
        if used + len(line) > max_total_chars:
            break
        lines.append(line)
        used += len(line)
    if not lines:
        return ""
    return "[Memory context]\n" + "".join(lines) + "[/Memory context]\n\n"


def conversation_memory_key(channel: str, sender: str, message_id: str,
                            thread_ts: str | None = None) -> str:
    """The key a chat message is auto-saved under."""
    if thread_ts:
        return f"{channel}_{thread_ts}_{sender}_{message_id}"
    return f"{channel}_{sender}_{message_id}"
