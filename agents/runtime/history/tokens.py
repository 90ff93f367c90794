"""How many tokens a history takes, estimated without a tokenizer."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..messages import ImageBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from .shapes import as_message, content_text, tool_input_text, utf8_len

# An attached image, as the large providers count a typical one (OpenAI: 765 for a 1024×1024
# image at high detail; Anthropic: about width×height/750).
IMAGE_TOKENS = 800


def estimate_message_tokens(message: Message) -> int:
    """Claw Code's per-block estimate: a quarter of the bytes (floored) plus one per block."""
    total = 0
    for block in message.blocks:
        if isinstance(block, TextBlock):
            total += utf8_len(block.text) // 4 + 1
        elif isinstance(block, ToolUseBlock):
            total += (utf8_len(block.name) + utf8_len(tool_input_text(block))) // 4 + 1
        elif isinstance(block, ToolResultBlock):
            total += (utf8_len(block.name) + utf8_len(block.output)) // 4 + 1
        elif isinstance(block, ImageBlock):
            total += IMAGE_TOKENS + 1
        else:
            total += utf8_len(block.thinking) // 4
            if block.signature is not None:
                total += utf8_len(block.signature) // 4 + 1
    return total


def estimate_turn_tokens(item: Message | Mapping[str, Any]) -> int:
    """ZeroClaw's per-message estimate: ~4 bytes per token plus ~4 framing tokens (role,
    delimiters)."""
    return math.ceil(utf8_len(content_text(item)) / 4) + 4


def estimate_tokens(messages: Iterable[Message | Mapping[str, Any]]) -> int:
    """The history's size in tokens, as compaction counts it.

    Content-block messages (``Message`` or ``{"role", "blocks"}``) use Claw Code's per-block
    estimate; plain ``{"role", "content"}`` string turns use ZeroClaw's Σ(ceil(bytes/4)+4)."""
    total = 0
    for item in messages:
        if isinstance(item, Message) or "blocks" in item:
            total += estimate_message_tokens(as_message(item))
        else:
            total += estimate_turn_tokens(item)
    return total
