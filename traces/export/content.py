"""What a span may say of a turn's content, in the GenAI conventions' JSON shapes.

The content policy of an exporter (``off``, ``redacted``, ``full``) decides whether the opt-in
attributes are sent at all: ``gen_ai.system_instructions``, ``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.tool.definitions``, ``gen_ai.tool.call.arguments`` and
``gen_ai.tool.call.result`` (and agentsite's own trajectory-state fields). ``redacted`` scrubs
every string again for credentials (by shape, as everything stored already was) and cuts it
to the exporter's ``max_field_chars``, saying how much was cut; ``full`` sends what is stored.

Shapes (semantic-conventions-genai, ``gen-ai-input-messages.json`` and friends): a message is
``{"role", "parts": [...]}``; parts are ``text`` (``content``), ``reasoning`` (``content``),
``tool_call`` (``id``, ``name``, ``arguments``), ``tool_call_response`` (``id``,
``response``) and ``uri`` for an image (``modality``, ``mime_type``, ``uri``: the attachment's
public id, never its bytes). Output messages add ``finish_reason``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agents.runtime.scrub import scrub_secrets

OFF, REDACTED, FULL = "off", "redacted", "full"
POLICIES = (OFF, REDACTED, FULL)
DEFAULT_MAX_FIELD_CHARS = 1000
# Deeper than this, an argument object is cut (a hostile tool input cannot recurse the exporter).
MAX_DEPTH = 20


class Policy:
    """How much content leaves, and how it is cut."""

    def __init__(self, mode: str = OFF, max_field_chars: int = DEFAULT_MAX_FIELD_CHARS) -> None:
        self.mode = mode if mode in POLICIES else OFF
        self.max_field_chars = max(int(max_field_chars or DEFAULT_MAX_FIELD_CHARS), 16)

    @property
    def on(self) -> bool:
        return self.mode != OFF

    def text(self, value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        if self.mode != REDACTED:
            return text
        text = scrub_secrets(text)
        limit = self.max_field_chars
        if len(text) > limit:
            return f"{text[:limit]}… [{len(text) - limit} more characters redacted]"
        return text

    def value(self, value: Any, depth: int = 0) -> Any:
        """``value`` (a JSON value) with every string passed through ``text``."""
        if depth > MAX_DEPTH:
            return "…"
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {str(k): self.value(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v, depth + 1) for v in value]
        return value

    def json(self, value: Any) -> str:
        """A structured attribute as the conventions send it over OTLP: a JSON string."""
        return json.dumps(self.value(value), ensure_ascii=False, default=str)


def _part(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        text = str(block.get("text") or "")
        return {"type": "text", "content": text} if text else None
    if kind == "thinking":
        return {"type": "reasoning", "content": str(block.get("thinking") or "")}
    if kind == "tool_use":
        return {"type": "tool_call", "id": str(block.get("id") or ""),
                "name": str(block.get("name") or ""), "arguments": block.get("input") or {}}
    if kind == "tool_result":
        return {"type": "tool_call_response", "id": str(block.get("tool_use_id") or ""),
                "response": str(block.get("output") or "")}
    if kind == "image":
        return {"type": "uri", "modality": "image", "mime_type": str(block.get("media_type") or ""),
                "uri": f"attachment:{block.get('attachment') or ''}"}
    return None


def message(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored message (``Message.to_dict()``: ``role``, ``blocks``) in the conventions' shape."""
    parts = [p for p in (_part(b) for b in stored.get("blocks") or [] if isinstance(b, dict))
             if p is not None]
    return {"role": str(stored.get("role") or "user"), "parts": parts}


def messages(stored: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [message(m) for m in stored if isinstance(m, dict)]


def system_instructions(system: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's system blocks as text parts."""
    return [{"type": "text", "content": str(b.get("text") or "")} for b in system
            if isinstance(b, dict) and b.get("text")]


def tool_definitions(specs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "name": str(s.get("name") or ""),
             "description": str(s.get("description") or ""),
             "parameters": s.get("parameters") or {}} for s in specs if isinstance(s, dict)]


def output_message(stored: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {**message(stored), "finish_reason": finish_reason}
