"""Claw Code's compaction: older messages become one system message.

That message is a fixed preamble plus a structured summary; the most recent messages are kept
verbatim, a tool_use/tool_result pair is never split at the boundary, and an earlier summary is
folded into the new one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from ..messages import (
    Block,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from .shapes import as_message, has_tool_use, tool_input_text
from .tokens import estimate_message_tokens

DEFAULT_PRESERVE_RECENT = 4
DEFAULT_COMPACTION_MAX_TOKENS = 10_000

COMPACT_CONTINUATION_PREAMBLE = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The summary below covers the earlier portion of the conversation.\n\n"
)
COMPACT_RECENT_MESSAGES_NOTE = "Recent messages are preserved verbatim."
COMPACT_DIRECT_RESUME_INSTRUCTION = (
    "Continue the conversation from where it left off without asking the user any further "
    "questions. Resume directly — do not acknowledge the summary, do not recap what was "
    "happening, and do not preface with continuation text."
)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    messages: list[Message]
    removed_message_count: int
    summary: str
    formatted_summary: str

    @property
    def compacted_messages(self) -> list[Message]:
        return self.messages

    @property
    def compacted(self) -> bool:
        return self.removed_message_count > 0


def _lines(text: str) -> list[str]:
    """Rust's ``str::lines``: split on ``\\n``, no trailing empty line, ``\\r`` stripped."""
    if not text:
        return []
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def _strip_tag_block(content: str, tag: str) -> str:
    start = content.find(f"<{tag}>")
    end = content.find(f"</{tag}>")
    if start < 0 or end < 0:
        return content
    return content[:start] + content[end + len(tag) + 3:]


def _extract_tag_block(content: str, tag: str) -> str | None:
    start = content.find(f"<{tag}>")
    if start < 0:
        return None
    start += len(tag) + 2
    end = content.find(f"</{tag}>", start)
    return content[start:end] if end >= 0 else None


def _collapse_blank_lines(content: str) -> str:
    result: list[str] = []
    last_blank = False
    for line in _lines(content):
        blank = not line.strip()
        if blank and last_blank:
            continue
        result.append(line + "\n")
        last_blank = blank
    return "".join(result)


def format_compact_summary(summary: str) -> str:
    """Drop the ``<analysis>`` scratchpad and turn ``<summary>X</summary>`` into
    ``"Summary:\\nX"``; blank lines are collapsed and the result trimmed."""
    without_analysis = _strip_tag_block(summary, "analysis")
    content = _extract_tag_block(without_analysis, "summary")
    formatted = without_analysis
    if content is not None:
        formatted = without_analysis.replace(
            f"<summary>{content}</summary>", f"Summary:\n{content.strip()}")
    return _collapse_blank_lines(formatted).strip()


def get_compact_continuation_message(summary: str, suppress_follow_up_questions: bool = True,
                                     recent_messages_preserved: bool = True) -> str:
    message = COMPACT_CONTINUATION_PREAMBLE + format_compact_summary(summary)
    if recent_messages_preserved:
        message += "\n\n" + COMPACT_RECENT_MESSAGES_NOTE
    if suppress_follow_up_questions:
        message += "\n" + COMPACT_DIRECT_RESUME_INSTRUCTION
    return message


def first_text_block(message: Message) -> str | None:
    for block in message.blocks:
        if isinstance(block, TextBlock) and block.text.strip():
            return block.text
    return None


def extract_existing_compacted_summary(message: Message) -> str | None:
    """The summary inside a continuation system message, or None for any other message."""
    if message.role != Role.SYSTEM:
        return None
    text = first_text_block(message)
    if text is None or not text.startswith(COMPACT_CONTINUATION_PREAMBLE):
        return None
    summary = text[len(COMPACT_CONTINUATION_PREAMBLE):]
    summary = summary.split("\n\n" + COMPACT_RECENT_MESSAGES_NOTE, 1)[0]
    summary = summary.split("\n" + COMPACT_DIRECT_RESUME_INSTRUCTION, 1)[0]
    return summary.strip()


def is_compaction_summary(message: Message) -> bool:
    return extract_existing_compacted_summary(message) is not None


def truncate_summary(content: str, max_chars: int) -> str:
    if len(content) <= max_chars:
        return content
    return content[:max_chars] + "…"


def summarize_block(block: Block) -> str:
    if isinstance(block, TextBlock):
        raw = block.text
    elif isinstance(block, ThinkingBlock):
        raw = f"thinking ({len(block.thinking)} chars)"
    elif isinstance(block, ToolUseBlock):
        raw = f"tool_use {block.name}({tool_input_text(block)})"
    elif isinstance(block, ImageBlock):
        raw = f"image ({block.media_type})"
    else:
        raw = f"tool_result {block.name}: {'error ' if block.is_error else ''}{block.output}"
    return truncate_summary(raw, 160)


def _ascii_lower(text: str) -> str:
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in text)


_PENDING_MARKERS = ("todo", "next", "pending", "follow up", "remaining")
_KEY_FILE_EXTENSIONS = {"rs", "ts", "tsx", "js", "json", "md"}
_KEY_FILE_TRIM = ",.:;)(\"'`"


def collect_recent_role_summaries(messages: Sequence[Message], role: Role, limit: int) -> list[str]:
    texts = [t for m in messages if m.role == role if (t := first_text_block(m)) is not None]
    return [truncate_summary(t, 160) for t in texts[-limit:]] if limit > 0 else []


def infer_pending_work(messages: Sequence[Message]) -> list[str]:
    texts = [t for m in messages if (t := first_text_block(m)) is not None
             and any(marker in _ascii_lower(t) for marker in _PENDING_MARKERS)]
    return [truncate_summary(t, 160) for t in texts[-3:]]


def _file_candidates(content: str) -> list[str]:
    found: list[str] = []
    for token in content.split():
        candidate = token.strip(_KEY_FILE_TRIM)
        suffix = PurePosixPath(candidate).suffix[1:] if "/" in candidate else ""
        if suffix and _ascii_lower(suffix) in _KEY_FILE_EXTENSIONS:
            found.append(candidate)
    return found


def collect_key_files(messages: Sequence[Message]) -> list[str]:
    files: set[str] = set()
    for message in messages:
        for block in message.blocks:
            if isinstance(block, TextBlock):
                files.update(_file_candidates(block.text))
            elif isinstance(block, ToolUseBlock):
                files.update(_file_candidates(tool_input_text(block)))
            elif isinstance(block, ToolResultBlock):
                files.update(_file_candidates(block.output))
    return sorted(files)[:8]


def infer_current_work(messages: Sequence[Message]) -> str | None:
    for message in reversed(messages):
        text = first_text_block(message)
        if text is not None:
            return truncate_summary(text, 200)
    return None


def summarize_messages(messages: Sequence[Message]) -> str:
    """The ``<summary>`` block describing ``messages``: scope, tools, recent requests, pending
    work, key files, current work and a one-line-per-message timeline."""
    counts = {role: sum(1 for m in messages if m.role == role)
              for role in (Role.USER, Role.ASSISTANT, Role.TOOL)}
    tool_names = sorted({name for m in messages for b in m.blocks
                         if (name := _block_tool_name(b))})
    lines = [
        "<summary>",
        "Conversation summary:",
        f"- Scope: {len(messages)} earlier messages compacted (user={counts[Role.USER]}, "
        f"assistant={counts[Role.ASSISTANT]}, tool={counts[Role.TOOL]}).",
    ]
    if tool_names:
        lines.append(f"- Tools mentioned: {', '.join(tool_names)}.")
    requests = collect_recent_role_summaries(messages, Role.USER, 3)
    if requests:
        lines.append("- Recent user requests:")
        lines.extend(f"  - {r}" for r in requests)
    pending = infer_pending_work(messages)
    if pending:
        lines.append("- Pending work:")
        lines.extend(f"  - {p}" for p in pending)
    key_files = collect_key_files(messages)
    if key_files:
        lines.append(f"- Key files referenced: {', '.join(key_files)}.")
    current = infer_current_work(messages)
    if current is not None:
        lines.append(f"- Current work: {current}")
    lines.append("- Key timeline:")
    for message in messages:
        content = " | ".join(summarize_block(b) for b in message.blocks)
        lines.append(f"  - {message.role}: {content}")
    lines.append("</summary>")
    return "\n".join(lines)


def _block_tool_name(block: Block) -> str:
    # Results recorded without a tool name would otherwise list an empty name.
    if isinstance(block, ToolUseBlock | ToolResultBlock):
        return block.name
    return ""


def extract_summary_highlights(summary: str) -> list[str]:
    highlights: list[str] = []
    for line in _lines(format_compact_summary(summary)):
        trimmed = line.rstrip()
        if trimmed in ("", "Summary:", "Conversation summary:"):
            continue
        if trimmed == "- Key timeline:":
            break
        highlights.append(trimmed)
    return highlights


def extract_summary_timeline(summary: str) -> list[str]:
    timeline: list[str] = []
    in_timeline = False
    for line in _lines(format_compact_summary(summary)):
        trimmed = line.rstrip()
        if trimmed == "- Key timeline:":
            in_timeline = True
            continue
        if not in_timeline:
            continue
        if not trimmed:
            break
        timeline.append(trimmed)
    return timeline


def merge_compact_summaries(existing_summary: str | None, new_summary: str) -> str:
    """Fold an earlier compaction's summary into a new one.

    The earlier highlights go under ``- Previously compacted context:``, indented like the new
    ones. (Claw Code at 08106b0c dropped that header and prefixed each old line with ``"- "``,
    giving ``"- - Scope: …"`` lines that lose the nesting and deepen on every re-compaction.)"""
    if existing_summary is None:
        return new_summary
    previous = extract_summary_highlights(existing_summary)
    new_formatted = format_compact_summary(new_summary)
    new_highlights = extract_summary_highlights(new_formatted)
    new_timeline = extract_summary_timeline(new_formatted)
    lines = ["<summary>", "Conversation summary:"]
    if previous:
        lines.append("- Previously compacted context:")
        lines.extend(f"  {line}" for line in previous)
    if new_highlights:
        lines.append("- Newly compacted context:")
        lines.extend(f"  {line}" for line in new_highlights)
    if new_timeline:
        lines.append("- Key timeline:")
        lines.extend(f"  {line}" for line in new_timeline)
    lines.append("</summary>")
    return "\n".join(lines)


def _split_prefix(messages: Sequence[Message]) -> tuple[list[Message], int, str | None]:
    """(system prompt kept as is, index where compactable messages start, earlier summary)."""
    head: list[Message] = []
    start = 0
    if messages and messages[0].role == Role.SYSTEM and not is_compaction_summary(messages[0]):
        head = [messages[0]]
        start = 1
    existing = extract_existing_compacted_summary(messages[start]) \
        if start < len(messages) else None
    if existing is not None:
        start += 1
    return head, start, existing


def should_compact(messages: Sequence[Message | Mapping[str, Any]], *,
                   preserve_recent: int = DEFAULT_PRESERVE_RECENT,
                   max_estimated_tokens: int = DEFAULT_COMPACTION_MAX_TOKENS) -> bool:
    """True when more than ``preserve_recent`` messages follow the system prompt and any earlier
    summary, and together they reach ``max_estimated_tokens``."""
    count, tokens = compactable_size(messages)
    return count > max(preserve_recent, 0) and tokens >= max_estimated_tokens


def compactable_size(messages: Sequence[Message | Mapping[str, Any]]) -> tuple[int, int]:
    """How many messages follow the system prompt and any earlier summary (what compaction may
    summarise), and their estimated tokens."""
    history = [as_message(m) for m in messages]
    _, start, _ = _split_prefix(history)
    compactable = history[start:]
    return len(compactable), sum(estimate_message_tokens(m) for m in compactable)


def _keep_from(messages: Sequence[Message], start: int, preserve_recent: int) -> int:
    count = len(messages)
    keep_from = count if preserve_recent <= 0 else max(count - preserve_recent, 0)
    # Never open the kept part with tool results whose tool call would be summarised away.
    while start < keep_from < count:
        first = messages[keep_from].blocks[0] if messages[keep_from].blocks else None
        if not isinstance(first, ToolResultBlock):
            break
        keep_from -= 1
        if has_tool_use(messages[keep_from]):
            break
    return keep_from


def compact(messages: Sequence[Message | Mapping[str, Any]], *,
            preserve_recent: int = DEFAULT_PRESERVE_RECENT,
            max_estimated_tokens: int = DEFAULT_COMPACTION_MAX_TOKENS) -> CompactionResult:
    """Summarise all but the last ``preserve_recent`` messages into one system message.

    A leading system prompt is kept in front; an earlier compaction summary is merged into the
    new one. Returns the input unchanged (0 removed, empty summary) when ``should_compact`` is
    false or nothing could be removed without splitting a tool call from its result."""
    history = [as_message(m) for m in messages]
    unchanged = CompactionResult(history, 0, "", "")
    if not should_compact(history, preserve_recent=preserve_recent,
                          max_estimated_tokens=max_estimated_tokens):
        return unchanged
    head, start, existing = _split_prefix(history)
    keep_from = _keep_from(history, start, preserve_recent)
    removed = history[start:keep_from]
    if not removed:
        return unchanged
    preserved = history[keep_from:]
    summary = merge_compact_summaries(existing, summarize_messages(removed))
    continuation = get_compact_continuation_message(summary, True, bool(preserved))
    return CompactionResult(
        messages=[*head, Message.system(continuation), *preserved],
        removed_message_count=len(removed),
        summary=summary,
        formatted_summary=format_compact_summary(summary),
    )
