"""Keeping a history under a message cap or byte budget, after ZeroClaw.

Tool output is truncated head+tail; messages are dropped oldest first, sparing the system
prompt. Whatever is dropped, a tool result never opens the history without the assistant
message that asked for it (``Agent::trim_history``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..messages import Block, Message, Role, ToolResultBlock
from .shapes import (
    H,
    content_text,
    has_tool_use,
    is_tool_result_message,
    role_of,
    utf8,
    utf8_len,
)

DEFAULT_MAX_HISTORY_MESSAGES = 50
FAST_TRIM_MAX_BYTES = 2000
RECOVERY_KEEP_RECENT = 4


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
    data = utf8(output)
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
    if max_chars <= 0 or utf8_len(content) <= max_chars:
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
        if isinstance(block, ToolResultBlock) and utf8_len(block.output) > max_bytes:
            output = truncate_tool_result(block.output, max_bytes)
            saved += utf8_len(block.output) - utf8_len(output)
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
            if is_tool_result_message(item):
                messages[index], gained = _trimmed_tool_message(item, FAST_TRIM_MAX_BYTES)
                saved += gained
            continue
        content = content_text(item)
        if role_of(item) == "tool" and utf8_len(content) > FAST_TRIM_MAX_BYTES:
            trimmed = truncate_tool_message(content, FAST_TRIM_MAX_BYTES)
            saved += utf8_len(content) - utf8_len(trimmed)
            messages[index] = {**item, "content": trimmed}
    return saved


# ---------------------------------------------------------------------------------------------
# Dropping messages (ZeroClaw, with the no-orphan rule)
# ---------------------------------------------------------------------------------------------
def _leading_system_count(messages: Sequence[Message | Mapping[str, Any]]) -> int:
    count = 0
    while count < len(messages) and role_of(messages[count]) == "system":
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
    while end < len(messages) and is_tool_result_message(messages[end]):
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
            if is_tool_result_message(item):
                cleaned = _orphan_free(item, known_ids, follows_call)
                if cleaned is None:
                    del messages[index]
                    removed += 1
                    continue
                messages[index] = cleaned
                follows_call = True
            else:
                follows_call = item.role == Role.ASSISTANT and has_tool_use(item)
        elif role_of(item) == "tool":
            if not follows_call:
                del messages[index]
                removed += 1
                continue
        else:
            follows_call = role_of(item) == "assistant"
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
        role = role_of(messages[index])
        if role == "system":
            index += 1
            continue
        end = index + 1
        if role == "assistant":
            while end < len(messages) and is_tool_result_message(messages[end]):
                end += 1
            if end > limit:
                # Its results are among the protected recent messages: keep the pair whole.
                break
        del messages[index:end]
        dropped += end - index
    return dropped + remove_orphaned_tool_results(messages)
