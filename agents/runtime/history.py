"""Keeping a conversation inside the model's context window: trimming, truncation, compaction.

Two families of rules live here, both applied to the runtime's content-block ``Message`` history:

* ZeroClaw's trimming: a message cap that keeps the system prompt, head+tail truncation of large
  tool results, and the context-overflow recovery steps. Whatever is dropped, a tool result never
  opens the history without the assistant message that asked for it (``Agent::trim_history``).
* Claw Code's compaction: older messages become one system message (a fixed preamble plus a
  structured summary), the most recent ones are kept verbatim, and a tool_use/tool_result pair is
  never split at the boundary.

The ZeroClaw helpers also accept plain ``{"role", "content"}`` string turns (ZeroClaw's own
history shape, used by the conformance vectors); the Claw Code helpers also accept
``{"role", "blocks"}`` dicts. Lengths follow the originals: "bytes" are UTF-8 bytes and "chars"
are code points.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any, TypeVar

from .messages import (
    Block,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

H = TypeVar("H", Message, dict[str, Any])

DEFAULT_MAX_HISTORY_MESSAGES = 50
FAST_TRIM_MAX_BYTES = 2000
RECOVERY_KEEP_RECENT = 4
PROACTIVE_CONTEXT_BUDGET_CHARS = 400_000

DEFAULT_PRESERVE_RECENT = 4
DEFAULT_COMPACTION_MAX_TOKENS = 10_000
DEFAULT_AUTO_COMPACT_INPUT_TOKENS = 100_000

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


# ---------------------------------------------------------------------------------------------
# Reading either history shape
# ---------------------------------------------------------------------------------------------
def _role(item: Message | Mapping[str, Any]) -> str:
    if isinstance(item, Message):
        return str(item.role)
    return str(item.get("role", ""))


def _is_tool_result_message(item: Message | Mapping[str, Any]) -> bool:
    if isinstance(item, Message):
        return item.role == Role.TOOL or (
            bool(item.blocks) and isinstance(item.blocks[0], ToolResultBlock))
    return _role(item) == "tool"


def _has_tool_use(message: Message) -> bool:
    return any(isinstance(b, ToolUseBlock) for b in message.blocks)


def tool_input_text(block: ToolUseBlock) -> str:
    """A tool call's arguments as compact JSON with sorted keys (what serde_json writes)."""
    return json.dumps(block.input, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                      default=str)


def _block_text(block: Block) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ThinkingBlock):
        return block.thinking
    if isinstance(block, ToolUseBlock):
        return block.name + tool_input_text(block)
    return block.output


def _content_text(item: Message | Mapping[str, Any]) -> str:
    """Everything a message puts in front of the model, as one string."""
    if isinstance(item, Message):
        return "".join(_block_text(b) for b in item.blocks)
    content = item.get("content")
    return content if isinstance(content, str) else ""


def _utf8(text: str) -> bytes:
    # surrogatepass: tool output decoded with surrogateescape must not crash the byte counts.
    return text.encode("utf-8", "surrogatepass")


def _utf8_len(text: str) -> int:
    return len(_utf8(text))


def _as_message(item: Message | Mapping[str, Any]) -> Message:
    if isinstance(item, Message):
        return item
    if "blocks" in item:
        return Message.from_dict(dict(item))
    return Message(Role(_role(item)), [TextBlock(_content_text(item))])


# ---------------------------------------------------------------------------------------------
# Token estimates
# ---------------------------------------------------------------------------------------------
def estimate_message_tokens(message: Message) -> int:
    """Claw Code's per-block estimate: a quarter of the bytes (floored) plus one per block."""
    total = 0
    for block in message.blocks:
        if isinstance(block, TextBlock):
            total += _utf8_len(block.text) // 4 + 1
        elif isinstance(block, ToolUseBlock):
            total += (_utf8_len(block.name) + _utf8_len(tool_input_text(block))) // 4 + 1
        elif isinstance(block, ToolResultBlock):
            total += (_utf8_len(block.name) + _utf8_len(block.output)) // 4 + 1
        else:
            total += _utf8_len(block.thinking) // 4
            if block.signature is not None:
                total += _utf8_len(block.signature) // 4 + 1
    return total


def estimate_session_tokens(messages: Iterable[Message | Mapping[str, Any]]) -> int:
    return sum(estimate_message_tokens(_as_message(m)) for m in messages)


def _turn_tokens(item: Message | Mapping[str, Any]) -> int:
    # ~4 bytes per token plus ~4 framing tokens (role, delimiters) per message.
    return math.ceil(_utf8_len(_content_text(item)) / 4) + 4


def estimate_history_tokens(messages: Iterable[Message | Mapping[str, Any]]) -> int:
    """ZeroClaw's estimate, framing included: Σ(ceil(bytes/4) + 4) over messages."""
    return sum(_turn_tokens(m) for m in messages)


def estimate_tokens(messages: Iterable[Message | Mapping[str, Any]]) -> int:
    """The history's size in tokens, as compaction counts it.

    Content-block messages (``Message`` or ``{"role", "blocks"}``) use Claw Code's per-block
    estimate; plain ``{"role", "content"}`` string turns use ZeroClaw's Σ(ceil(bytes/4)+4)."""
    total = 0
    for item in messages:
        if isinstance(item, Message) or "blocks" in item:
            total += estimate_message_tokens(_as_message(item))
        else:
            total += _turn_tokens(item)
    return total


# ---------------------------------------------------------------------------------------------
# Truncating tool output (ZeroClaw)
# ---------------------------------------------------------------------------------------------
def _is_char_boundary(data: bytes, index: int) -> bool:
    return index <= 0 or index >= len(data) or (data[index] & 0xC0) != 0x80


def _floor_boundary(data: bytes, index: int) -> int:
    if index >= len(data):
        return len(data)
    while index > 0 and not _is_char_boundary(data, index):
        index -= 1
    return index


def _ceil_boundary(data: bytes, index: int) -> int:
    while index < len(data) and not _is_char_boundary(data, index):
        index += 1
    return index


def truncate_tool_result(output: str, max_chars: int) -> str:
    """Keep the first 2/3 and the last 1/3 of ``max_chars`` bytes with a marker between.

    Unchanged when ``max_chars`` is 0 or the output fits. Cuts land on character boundaries and
    the marker counts the bytes removed: ``"\\n\\n[... N characters truncated ...]\\n\\n"``."""
    data = _utf8(output)
    if max_chars <= 0 or len(data) <= max_chars:
        return output
    head_len = max_chars * 2 // 3
    tail_len = max_chars - head_len
    head_end = _floor_boundary(data, head_len)
    tail_start = _ceil_boundary(data, max(len(data) - tail_len, 0))
    if head_end >= tail_start:
        return data[:_floor_boundary(data, max_chars)].decode("utf-8", "surrogatepass")
    return (
        f"{data[:head_end].decode('utf-8', 'surrogatepass')}\n\n"
        f"[... {tail_start - head_end} characters truncated ...]\n\n"
        f"{data[tail_start:].decode('utf-8', 'surrogatepass')}"
    )


def truncate_tool_message(content: str, max_chars: int) -> str:
    """Truncate a ``{"tool_call_id", "content"}`` JSON envelope's ``content`` only, keeping the
    envelope valid; anything else is truncated as plain text."""
    if max_chars <= 0 or _utf8_len(content) <= max_chars:
        return content
    try:
        envelope = json.loads(content)
    except ValueError:
        envelope = None
    if (isinstance(envelope, dict) and "tool_call_id" in envelope
            and isinstance(envelope.get("content"), str)):
        envelope["content"] = truncate_tool_result(envelope["content"], max_chars)
        return json.dumps(envelope, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return truncate_tool_result(content, max_chars)


def _trimmed_tool_message(message: Message, max_bytes: int) -> tuple[Message, int]:
    saved = 0
    blocks: list[Block] = []
    for block in message.blocks:
        if isinstance(block, ToolResultBlock) and _utf8_len(block.output) > max_bytes:
            output = truncate_tool_result(block.output, max_bytes)
            saved += _utf8_len(block.output) - _utf8_len(output)
            block = replace(block, output=output)
        blocks.append(block)
    if not saved:
        return message, 0
    return Message(message.role, blocks, message.usage), saved


def fast_trim_tool_results(messages: list[H], protect_last_n: int = RECOVERY_KEEP_RECENT) -> int:
    """Truncate tool results over 2000 bytes, except in the last ``protect_last_n`` messages.

    Changes ``messages`` in place (replacing, never mutating, the messages it shortens) and
    returns the number of bytes saved."""
    saved = 0
    cutoff = max(len(messages) - max(protect_last_n, 0), 0)
    for index in range(cutoff):
        item = messages[index]
        if isinstance(item, Message):
            if _is_tool_result_message(item):
                messages[index], gained = _trimmed_tool_message(item, FAST_TRIM_MAX_BYTES)
                saved += gained
            continue
        content = _content_text(item)
        if _role(item) == "tool" and _utf8_len(content) > FAST_TRIM_MAX_BYTES:
            trimmed = truncate_tool_message(content, FAST_TRIM_MAX_BYTES)
            saved += _utf8_len(content) - _utf8_len(trimmed)
            messages[index] = {**item, "content": trimmed}
    return saved


# ---------------------------------------------------------------------------------------------
# Dropping messages (ZeroClaw, with the no-orphan rule)
# ---------------------------------------------------------------------------------------------
def _leading_system_count(messages: Sequence[Message | Mapping[str, Any]]) -> int:
    count = 0
    while count < len(messages) and _role(messages[count]) == "system":
        count += 1
    return count


def trim_history(messages: list[H], max_messages: int = DEFAULT_MAX_HISTORY_MESSAGES) -> list[H]:
    """Cap the history at ``max_messages`` non-system messages, dropping the oldest.

    The leading system message(s) (the prompt, a compaction summary) are kept. If the cut would
    leave a tool result first, that result is dropped too, so no result survives without its
    tool call. Changes ``messages`` in place and returns it."""
    start = _leading_system_count(messages)
    limit = max(max_messages, 0)
    if len(messages) - start <= limit:
        return messages
    end = start + (len(messages) - start - limit)
    while end < len(messages) and _is_tool_result_message(messages[end]):
        end += 1
    del messages[start:end]
    return messages


def _orphan_free(message: Message, known_ids: set[str], follows_call: bool) -> Message | None:
    kept: list[Block] = []
    for block in message.blocks:
        if isinstance(block, ToolResultBlock):
            # Results without an id can only be matched by position.
            answered = block.tool_use_id in known_ids if block.tool_use_id else follows_call
            if not answered:
                continue
        kept.append(block)
    if len(kept) == len(message.blocks):
        return message
    return Message(message.role, kept, message.usage) if kept else None


def remove_orphaned_tool_results(messages: list[H]) -> int:
    """Drop tool results whose tool call is no longer in the history; returns how many
    messages were removed. A message with only some orphaned results keeps the others."""
    removed = 0
    known_ids: set[str] = set()
    follows_call = False
    index = 0
    while index < len(messages):
        item = messages[index]
        if isinstance(item, Message):
            if item.role == Role.ASSISTANT:
                known_ids.update(b.id for b in item.tool_uses)
            if _is_tool_result_message(item):
                cleaned = _orphan_free(item, known_ids, follows_call)
                if cleaned is None:
                    del messages[index]
                    removed += 1
                    continue
                messages[index] = cleaned
                follows_call = True
            else:
                follows_call = item.role == Role.ASSISTANT and _has_tool_use(item)
        elif _role(item) == "tool":
            if not follows_call:
                del messages[index]
                removed += 1
                continue
        else:
            follows_call = _role(item) == "assistant"
        index += 1
    return removed


def emergency_history_trim(messages: list[H], keep_recent: int = RECOVERY_KEEP_RECENT) -> int:
    """Drop about a third of the history, oldest first, sparing system messages and the last
    ``keep_recent``. An assistant message goes together with the tool results after it.
    Changes ``messages`` in place; returns the number of messages dropped."""
    keep_recent = max(keep_recent, 0)
    target = len(messages) // 3
    dropped = 0
    index = 0
    while dropped < target and index < len(messages) - keep_recent:
        limit = len(messages) - keep_recent
        role = _role(messages[index])
        if role == "system":
            index += 1
            continue
        end = index + 1
        if role == "assistant":
            while end < len(messages) and _is_tool_result_message(messages[end]):
                end += 1
            if end > limit:
                # Its results are among the protected recent messages: keep the pair whole.
                break
        del messages[index:end]
        dropped += end - index
    return dropped + remove_orphaned_tool_results(messages)


# ---------------------------------------------------------------------------------------------
# Channel-side history hygiene (ZeroClaw channels)
# ---------------------------------------------------------------------------------------------
def _is_empty(item: Message | Mapping[str, Any]) -> bool:
    if isinstance(item, Message):
        return all(isinstance(b, TextBlock) and not b.text for b in item.blocks)
    return not _content_text(item)


def _merge_turns(last: H, new: H) -> H:
    if not isinstance(last, Message) and not isinstance(new, Message):
        previous = _content_text(last)
        joined = previous + ("\n\n" if previous else "") + _content_text(new)
        return {**last, "content": joined}
    last, new = _as_message(last), _as_message(new)
    blocks = list(last.blocks)
    incoming = list(new.blocks)
    if blocks and incoming and isinstance(blocks[-1], TextBlock) \
            and isinstance(incoming[0], TextBlock):
        joined = blocks[-1].text + ("\n\n" if blocks[-1].text else "") + incoming[0].text
        blocks[-1] = TextBlock(joined)
        incoming = incoming[1:]
    usage = last.usage if new.usage is None else (
        new.usage if last.usage is None else last.usage + new.usage)
    return Message(last.role, blocks + incoming, usage)


def normalize_cached_channel_turns(turns: Sequence[H]) -> list[H]:
    """Make a stored conversation alternate user/assistant again.

    A user turn where an assistant turn was expected (an interrupted turn) is merged into the
    previous turn with a blank line, and likewise for assistant turns; an assistant turn with
    nothing before it is dropped. Tool messages pass through and are followed by an assistant
    turn. System messages pass through untouched."""
    normalized: list[H] = []
    expecting_user = True
    for turn in turns:
        role = _role(turn)
        if role == "system":
            normalized.append(turn)
        elif role == "tool" or (expecting_user and role == "user"):
            normalized.append(turn)
            expecting_user = False
        elif not expecting_user and role == "assistant":
            normalized.append(turn)
            expecting_user = True
        elif role in ("user", "assistant"):
            if not normalized or _role(normalized[-1]) == "system" or _is_empty(turn):
                continue
            if isinstance(turn, Message) and _is_tool_result_message(normalized[-1]):
                # Folding user text into a tool message would break the tool protocol; a user
                # turn right after tool results is valid on its own.
                normalized.append(turn)
                continue
            normalized[-1] = _merge_turns(normalized[-1], turn)
    return normalized


def proactive_trim_turns(turns: list[H], budget_chars: int = PROACTIVE_CONTEXT_BUDGET_CHARS) -> int:
    """Drop the oldest turns until the history's characters fit ``budget_chars``; the last turn
    is always kept, and no tool result is left first. Returns how many turns were dropped."""
    excess = sum(len(_content_text(t)) for t in turns) - budget_chars
    if excess <= 0:
        return 0
    dropped = 0
    while excess > 0 and len(turns) - dropped > 1:
        excess -= len(_content_text(turns[dropped]))
        dropped += 1
    while len(turns) - dropped > 1 and _is_tool_result_message(turns[dropped]):
        dropped += 1
    del turns[:dropped]
    return dropped


# ---------------------------------------------------------------------------------------------
# Compaction (Claw Code)
# ---------------------------------------------------------------------------------------------
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
    history = [_as_message(m) for m in messages]
    _, start, _ = _split_prefix(history)
    compactable = history[start:]
    return (len(compactable) > max(preserve_recent, 0)
            and sum(estimate_message_tokens(m) for m in compactable) >= max_estimated_tokens)


def _keep_from(messages: Sequence[Message], start: int, preserve_recent: int) -> int:
    count = len(messages)
    keep_from = count if preserve_recent <= 0 else max(count - preserve_recent, 0)
    # Never open the kept part with tool results whose tool call would be summarised away.
    while start < keep_from < count:
        first = messages[keep_from].blocks[0] if messages[keep_from].blocks else None
        if not isinstance(first, ToolResultBlock):
            break
        keep_from -= 1
        if _has_tool_use(messages[keep_from]):
            break
    return keep_from


def compact(messages: Sequence[Message | Mapping[str, Any]], *,
            preserve_recent: int = DEFAULT_PRESERVE_RECENT,
            max_estimated_tokens: int = DEFAULT_COMPACTION_MAX_TOKENS) -> CompactionResult:
    """Summarise all but the last ``preserve_recent`` messages into one system message.

    A leading system prompt is kept in front; an earlier compaction summary is merged into the
    new one. Returns the input unchanged (0 removed, empty summary) when ``should_compact`` is
    false or nothing could be removed without splitting a tool call from its result."""
    history = [_as_message(m) for m in messages]
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


_THRESHOLD_RE = re.compile(r"\+?[0-9]+")
_U32_MAX = 2**32 - 1


def parse_auto_compaction_threshold(value: str | None) -> int:
    """The cumulative-input-token threshold for auto-compaction: a positive 32-bit integer, or
    the 100,000 default for anything else (missing, 0, junk)."""
    if value is None or not _THRESHOLD_RE.fullmatch(value):
        return DEFAULT_AUTO_COMPACT_INPUT_TOKENS
    number = int(value)
    return number if 0 < number <= _U32_MAX else DEFAULT_AUTO_COMPACT_INPUT_TOKENS


def auto_compact(messages: Sequence[Message | Mapping[str, Any]], *, cumulative_input_tokens: int,
                 threshold: int = DEFAULT_AUTO_COMPACT_INPUT_TOKENS,
                 preserve_recent: int = DEFAULT_PRESERVE_RECENT) -> CompactionResult | None:
    """Claw Code's auto-compaction after an assistant message: once the conversation's
    cumulative input tokens reach ``threshold``, compact whatever precedes the recent messages.
    None below the threshold."""
    if cumulative_input_tokens < threshold:
        return None
    return compact(messages, preserve_recent=preserve_recent, max_estimated_tokens=0)


# ---------------------------------------------------------------------------------------------
# Context-overflow recovery
# ---------------------------------------------------------------------------------------------
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


def recover_from_context_overflow(messages: list[Message]) -> bool:
    """``recover_context`` with the defaults; True when anything was removed or shortened."""
    return bool(recover_context(messages))
