"""trim_history.json: ZeroClaw's history cap, tool-result truncation and overflow recovery.

The vectors use ZeroClaw's ``{role, content}`` string turns. Each is run twice: on our
content-block ``Message`` history (through the adapters below) and on the string turns as given,
which the history helpers also accept.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from agents.runtime.history import (
    emergency_history_trim,
    fast_trim_tool_results,
    trim_history,
    truncate_tool_message,
    truncate_tool_result,
)
from agents.runtime.messages import Message, Role, TextBlock, ToolResultBlock, ToolUseBlock
from tests.agents.runtime.conformance import vectors

FILE = "trim_history.json"


def to_message(turn: dict[str, str]) -> Message:
    if turn["role"] == "tool":
        return Message(Role.TOOL, [ToolResultBlock(tool_use_id="", output=turn["content"])])
    return Message(Role(turn["role"]), [TextBlock(turn["content"])])


def to_turn(message: Message) -> dict[str, str]:
    (block,) = message.blocks
    content = block.output if isinstance(block, ToolResultBlock) else block.text
    return {"role": str(message.role), "content": content}


@pytest.mark.parametrize("v", vectors(FILE, "trim_history"))
def test_trim_history(v: dict[str, Any]) -> None:
    history = [to_message(t) for t in v["input"]["history"]]
    result = trim_history(history, v["input"]["max_history"])
    assert result is history
    assert [to_turn(m) for m in history] == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "trim_history"))
def test_trim_history_on_string_turns(v: dict[str, Any]) -> None:
    turns = copy.deepcopy(v["input"]["history"])
    trim_history(turns, v["input"]["max_history"])
    assert turns == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "truncate_tool_result"))
def test_truncate_tool_result(v: dict[str, Any]) -> None:
    assert truncate_tool_result(v["input"]["output"], v["input"]["max_chars"]) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "truncate_tool_message"))
def test_truncate_tool_message(v: dict[str, Any]) -> None:
    result = truncate_tool_message(v["input"]["content"], v["input"]["max_chars"])
    assert result == v["expected"]
    json.loads(result)  # the envelope stays valid JSON


@pytest.mark.parametrize("v", vectors(FILE, "fast_trim_tool_results"))
def test_fast_trim_tool_results(v: dict[str, Any]) -> None:
    history = [to_message(t) for t in v["input"]["history"]]
    saved = fast_trim_tool_results(history, v["input"]["protect_last_n"])
    assert {"history": [to_turn(m) for m in history], "saved": saved} == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "fast_trim_tool_results"))
def test_fast_trim_tool_results_on_string_turns(v: dict[str, Any]) -> None:
    turns = copy.deepcopy(v["input"]["history"])
    saved = fast_trim_tool_results(turns, v["input"]["protect_last_n"])
    assert {"history": turns, "saved": saved} == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "emergency_history_trim"))
def test_emergency_history_trim(v: dict[str, Any]) -> None:
    history = [to_message(t) for t in v["input"]["history"]]
    dropped = emergency_history_trim(history, v["input"]["keep_recent"])
    assert {"dropped": dropped, "history": [to_turn(m) for m in history]} == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "emergency_history_trim"))
def test_emergency_history_trim_on_string_turns(v: dict[str, Any]) -> None:
    turns = copy.deepcopy(v["input"]["history"])
    dropped = emergency_history_trim(turns, v["input"]["keep_recent"])
    assert {"dropped": dropped, "history": turns} == v["expected"]


# -- Agent::trim_history: ZeroClaw's structured history, mapped onto content blocks -------------
def from_conversation_message(entry: dict[str, Any]) -> Message:
    if entry["type"] == "AssistantToolCalls":
        blocks: list[Any] = [TextBlock(entry["text"])] if entry.get("text") else []
        blocks += [ToolUseBlock(id=c["id"], name=c["name"], input=json.loads(c["arguments"]))
                   for c in entry["tool_calls"]]
        return Message(Role.ASSISTANT, blocks)
    if entry["type"] == "ToolResults":
        return Message.tool_results([ToolResultBlock(tool_use_id=r["tool_call_id"],
                                                     output=r["content"])
                                     for r in entry["results"]])
    raise AssertionError(f"unexpected entry {entry['type']}")


def to_conversation_message(message: Message) -> dict[str, Any]:
    if message.role == Role.TOOL:
        return {"type": "ToolResults",
                "results": [{"tool_call_id": b.tool_use_id, "content": b.output}
                            for b in message.tool_results_blocks]}
    return {"type": "AssistantToolCalls", "text": message.text,
            "tool_calls": [{"id": b.id, "name": b.name,
                            "arguments": json.dumps(b.input, separators=(",", ":"))}
                           for b in message.tool_uses]}


@pytest.mark.parametrize("v", vectors(FILE, "Agent::trim_history"))
def test_agent_trim_history_never_leaves_an_orphan_result_first(v: dict[str, Any]) -> None:
    history = [from_conversation_message(e) for e in v["input"]["history"]]
    trim_history(history, v["input"]["max_history_messages"])
    assert {"history": [to_conversation_message(m) for m in history]} == v["expected"]
