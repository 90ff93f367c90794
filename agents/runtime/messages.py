"""The conversation history: messages made of content blocks.

This is the runtime's one history model (Claw Code's ``ConversationMessage``). Providers convert
it to and from their wire formats (``providers/openai.py``, ``providers/anthropic.py``); the
Django side stores ``Message.to_dict()`` as JSON.

Roles: ``system``, ``user``, ``assistant`` and ``tool``. A ``tool`` message carries one or more
``ToolResultBlock``s answering the ``ToolUseBlock``s of the assistant message before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .pricing import Usage


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(slots=True)
class TextBlock:
    text: str
    type: str = field(default="text", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(slots=True)
class ThinkingBlock:
    thinking: str
    signature: str | None = None
    type: str = field(default="thinking", init=False)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": "thinking", "thinking": self.thinking}
        if self.signature is not None:
            data["signature"] = self.signature
        return data


@dataclass(slots=True)
class ToolUseBlock:
    id: str
    name: str
    input: dict[str, Any]
    # Set when the model's arguments were not a JSON object: a plain sentence with the parse
    # error and the raw text. ``input`` is then ``{}``; the loop reports this as the call's
    # error result instead of running the tool.
    arguments_error: str | None = None
    type: str = field(default="tool_use", init=False)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": "tool_use", "id": self.id, "name": self.name,
                                "input": self.input}
        if self.arguments_error is not None:
            data["arguments_error"] = self.arguments_error
        return data

    @property
    def input_json(self) -> str:
        return json.dumps(self.input, ensure_ascii=False, sort_keys=True)


@dataclass(slots=True)
class ToolResultBlock:
    tool_use_id: str
    output: str
    is_error: bool = False
    name: str = ""
    type: str = field(default="tool_result", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "name": self.name,
            "output": self.output,
            "is_error": self.is_error,
        }


@dataclass(slots=True)
class ImageBlock:
    """An image a person attached: its media type and, when the request is built, its bytes as
    base64 (``data``). ``attachment`` names the stored file; the history and the trace keep only
    that, never the bytes."""

    media_type: str
    data: str = ""
    attachment: str = ""
    type: str = field(default="image", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "image", "media_type": self.media_type, "attachment": self.attachment}

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"


IMAGE_OMITTED = "[An image was attached here; this model cannot read images, so it was left out.]"

Block = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | ImageBlock


def images_in(messages: Any) -> list[ImageBlock]:
    return [b for m in messages for b in m.blocks if isinstance(b, ImageBlock)]


def without_images(message: Message) -> Message:
    """``message`` with each image replaced by a sentence saying one was left out (for a model
    without vision: ZeroClaw strips image markers from older turns)."""
    if not any(isinstance(b, ImageBlock) for b in message.blocks):
        return message
    blocks: list[Block] = [TextBlock(IMAGE_OMITTED) if isinstance(b, ImageBlock) else b
                           for b in message.blocks]
    return Message(message.role, blocks, message.usage)

# Between two runs of text that another block (a tool call, thinking) separates: they are
# separate paragraphs, not one sentence ("First." + tool call + "Second.").
TEXT_RUN_SEPARATOR = "\n\n"


def block_from_dict(data: dict[str, Any]) -> Block:
    kind = data.get("type")
    if kind == "text":
        return TextBlock(text=str(data.get("text", "")))
    if kind == "thinking":
        return ThinkingBlock(thinking=str(data.get("thinking", "")), signature=data.get("signature"))
    if kind == "tool_use":
        raw_input = data.get("input")
        if isinstance(raw_input, str):
            try:
                raw_input = json.loads(raw_input)
            except ValueError:
                raw_input = {}
        arguments_error = data.get("arguments_error")
        return ToolUseBlock(
            id=str(data.get("id", "")),
            name=str(data.get("name", "")),
            input=raw_input if isinstance(raw_input, dict) else {},
            arguments_error=str(arguments_error) if arguments_error is not None else None,
        )
    if kind == "image":
        return ImageBlock(media_type=str(data.get("media_type", "")), data=str(data.get("data", "")),
                          attachment=str(data.get("attachment", "")))
    if kind == "tool_result":
        return ToolResultBlock(
            tool_use_id=str(data.get("tool_use_id", "")),
            output=str(data.get("output", "")),
            is_error=bool(data.get("is_error", False)),
            name=str(data.get("name", "") or data.get("tool_name", "")),
        )
    raise ValueError(f"unknown content block type: {kind!r}")


@dataclass(slots=True)
class Message:
    role: Role
    blocks: list[Block] = field(default_factory=list)
    usage: Usage | None = None

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def system(cls, text: str) -> Message:
        return cls(Role.SYSTEM, [TextBlock(text)])

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(Role.USER, [TextBlock(text)])

    @classmethod
    def assistant(cls, text: str = "", *, blocks: list[Block] | None = None,
                  usage: Usage | None = None) -> Message:
        content: list[Block] = list(blocks) if blocks is not None else []
        if blocks is None and text:
            content.append(TextBlock(text))
        return cls(Role.ASSISTANT, content, usage)

    @classmethod
    def tool_results(cls, results: list[ToolResultBlock]) -> Message:
        return cls(Role.TOOL, list(results))

    # -- views ----------------------------------------------------------------------------------
    @property
    def text(self) -> str:
        """The text blocks joined; thinking, tool use and results are left out. Adjacent text
        blocks (one answer split for citations) are joined as they are; text blocks with another
        block between them are joined with ``TEXT_RUN_SEPARATOR``."""
        parts: list[str] = []
        separated = False
        for block in self.blocks:
            if not isinstance(block, TextBlock):
                separated = True
                continue
            if not block.text:
                continue
            if parts and separated:
                parts.append(TEXT_RUN_SEPARATOR)
            parts.append(block.text)
            separated = False
        return "".join(parts)

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.blocks if isinstance(b, ToolUseBlock)]

    @property
    def tool_results_blocks(self) -> list[ToolResultBlock]:
        return [b for b in self.blocks if isinstance(b, ToolResultBlock)]

    # -- (de)serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": str(self.role), "blocks": [b.to_dict() for b in self.blocks]}
        if self.usage is not None:
            data["usage"] = self.usage.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        usage = data.get("usage")
        return cls(
            role=Role(data["role"]),
            blocks=[block_from_dict(b) for b in data.get("blocks", [])],
            usage=Usage.from_dict(usage) if usage is not None else None,
        )


def close_dangling_tool_uses(messages: list[Message], output: str) -> int:
    """Give every ``tool_use`` without a result a synthetic error result ``output``, in place,
    so providers accept the history. Returns how many results were added.

    The one repair for calls a crash or a cancellation left open, used by the loop (on the
    incoming history and when a turn stops early) and meant for code that repairs stored
    conversations; it lives here so that such code need not import the loop."""
    added = 0
    i = 0
    while i < len(messages):
        message = messages[i]
        uses = message.tool_uses if message.role is Role.ASSISTANT else []
        if uses:
            following = messages[i + 1] if i + 1 < len(messages) else None
            answered_by = following if following is not None and following.role is Role.TOOL else None
            answered = {b.tool_use_id for b in answered_by.tool_results_blocks} if answered_by else set()
            missing = [ToolResultBlock(u.id, output, True, u.name) for u in uses if u.id not in answered]
            if missing:
                added += len(missing)
                if answered_by is not None:
                    messages[i + 1] = Message(Role.TOOL, [*answered_by.blocks, *missing])
                else:
                    messages.insert(i + 1, Message.tool_results(missing))
        i += 1
    return added
