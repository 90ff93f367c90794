"""Conversion helpers shared by the wire formats."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from ..messages import Message, Role, ToolUseBlock
from ..tools import ToolSpec
from .base import SystemBlock

RAW_ARGUMENTS_LIMIT = 500

# The Provider trait's default prompt-guided instructions (runtime_spec.md §3,
# ``build_tool_instructions_text``), used only when a provider without native tool calling is
# handed tool specs anyway.
TOOL_INSTRUCTIONS_HEADER = (
    "## Tool Use Protocol\n\n"
    "To use a tool, wrap a JSON object in <tool_call></tool_call> tags:\n\n"
    "<tool_call>\n"
    '{"name": "tool_name", "arguments": {"param": "value"}}\n'
    "</tool_call>\n\n"
    "You may use multiple tool calls in a single response. After tool execution, results appear "
    "in <tool_result> tags. Continue reasoning with the results until you can give a final "
    "answer.\n\n"
    "### Available Tools\n\n"
)


def tool_instructions_text(tools: Sequence[ToolSpec]) -> str:
    parts = [TOOL_INSTRUCTIONS_HEADER]
    for tool in tools:
        schema = json.dumps(tool.parameters, ensure_ascii=False, sort_keys=True)
        parts.append(f"**{tool.name}**: {tool.description}\nParameters: `{schema}`\n\n")
    return "".join(parts)


def system_texts(system: Sequence[SystemBlock], messages: Sequence[Message]) -> list[str]:
    """The system prompt's parts: the request's blocks, then any system-role history messages
    (neither wire format keeps system text between turns, so they are folded in here)."""
    texts = [block.text for block in system if block.text]
    texts.extend(m.text for m in messages if m.role == Role.SYSTEM and m.text)
    return texts


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_tool_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Arguments from the wire as a dict, and an error sentence when they were not a JSON object.

    A bad payload never raises: the call is kept with ``{}`` and the error (with the raw text)
    goes to ``ToolUseBlock.arguments_error`` so the loop can answer the call with it."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None:
        return {}, None
    if not isinstance(raw, str):
        return {}, _arguments_error("were not a JSON object", repr(raw))
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return {}, _arguments_error(f"were not valid JSON ({exc})", raw)
    if isinstance(value, str):
        # Some servers encode the arguments twice: a JSON string holding the JSON object.
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, dict):
        return value, None
    return {}, _arguments_error("were not a JSON object", raw)


def cut_tool_use(call_id: str, name: str, raw: Any) -> ToolUseBlock:
    """A tool call the output limit cut off (the last call of an answer stopped by ``length`` or
    ``max_tokens``): kept, so the history stays whole, but with an error instead of arguments,
    so it is never run as if it were complete."""
    shown = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
    shown = shown if len(shown) <= RAW_ARGUMENTS_LIMIT else shown[:RAW_ARGUMENTS_LIMIT] + "..."
    return ToolUseBlock(
        id=call_id or new_call_id(), name=name, input={},
        arguments_error=("The answer reached the output token limit in the middle of this tool "
                         "call, so its arguments are incomplete and the tool was not run. Make "
                         "the call again, with shorter arguments if they were long. Raw "
                         f"arguments: {shown}"))


def _arguments_error(problem: str, raw: str) -> str:
    shown = raw if len(raw) <= RAW_ARGUMENTS_LIMIT else raw[:RAW_ARGUMENTS_LIMIT] + "..."
    return (f"The tool arguments {problem}, so the tool was not run. "
            f"Send the arguments again as one JSON object. Raw arguments: {shown}")


def loads_object(text: str) -> dict[str, Any] | None:
    """A JSON object, or None for anything else (junk lines in a stream)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
