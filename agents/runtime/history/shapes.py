"""Reading either history shape: the runtime's content-block ``Message`` or a plain dict.

ZeroClaw's helpers take ``{"role", "content"}`` string turns (ZeroClaw's own history shape, used
by the conformance vectors); Claw Code's take ``{"role", "blocks"}`` dicts. Lengths follow the
originals: "bytes" are UTF-8 bytes and "chars" are code points.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

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

H = TypeVar("H", Message, dict[str, Any])


def role_of(item: Message | Mapping[str, Any]) -> str:
    if isinstance(item, Message):
        return str(item.role)
    return str(item.get("role", ""))


def is_tool_result_message(item: Message | Mapping[str, Any]) -> bool:
    if isinstance(item, Message):
        return item.role == Role.TOOL or (
            bool(item.blocks) and isinstance(item.blocks[0], ToolResultBlock))
    return role_of(item) == "tool"


def has_tool_use(message: Message) -> bool:
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
    if isinstance(block, ImageBlock):
        return f"[image {block.media_type}]"
    return block.output


def content_text(item: Message | Mapping[str, Any]) -> str:
    """Everything a message puts in front of the model, as one string."""
    if isinstance(item, Message):
        return "".join(_block_text(b) for b in item.blocks)
    content = item.get("content")
    return content if isinstance(content, str) else ""


def utf8(text: str) -> bytes:
    # surrogatepass: tool output decoded with surrogateescape must not crash the byte counts.
    return text.encode("utf-8", "surrogatepass")


def utf8_len(text: str) -> int:
    return len(utf8(text))


def as_message(item: Message | Mapping[str, Any]) -> Message:
    if isinstance(item, Message):
        return item
    if "blocks" in item:
        return Message.from_dict(dict(item))
    return Message(Role(role_of(item)), [TextBlock(content_text(item))])
