"""channel_history.json: ZeroClaw's channel-side history hygiene, memory skip rules, /stop,
turn time budget and keys."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agents.runtime.memory_context import conversation_memory_key, should_skip_memory_context_entry
from agents.runtime.messages import Message, Role, TextBlock, ToolResultBlock
from agents.runtime.upstream_ports import (
    interruption_scope_key,
    is_stop_command,
    message_timeout_budget_secs,
    normalize_cached_channel_turns,
    proactive_trim_turns,
)
from tests.agents.runtime.conformance import vectors

FILE = "channel_history.json"

# Vector functions deliberately not ported, with the reason. extract_tool_context_summary is
# #[cfg(test)]-only upstream (replies are stored without a '[Used tools: ...]' prefix), and our
# history keeps tool calls as structured blocks, so there is no text to scrape tool names from.
# The prefix itself, should a model echo one, is stripped from replies by
# strip_tool_summary_prefix (checked against sanitize_response.json).
NOT_PORTED = {"extract_tool_context_summary"}
TESTED = {
    "normalize_cached_channel_turns", "proactive_trim_turns", "channel_message_timeout_budget_secs",
    "should_skip_memory_context_entry", "is_stop_command", "interruption_scope_key",
    "conversation_memory_key",
}


def to_message(turn: dict[str, str]) -> Message:
    if turn["role"] == "tool":
        return Message(Role.TOOL, [ToolResultBlock(tool_use_id="", output=turn["content"])])
    return Message(Role(turn["role"]), [TextBlock(turn["content"])])


def to_turn(message: Message) -> dict[str, str]:
    (block,) = message.blocks
    content = block.output if isinstance(block, ToolResultBlock) else block.text
    return {"content": content, "role": str(message.role)}


@pytest.mark.parametrize("v", vectors(FILE, "normalize_cached_channel_turns"))
def test_normalize_cached_channel_turns(v: dict[str, Any]) -> None:
    normalized = normalize_cached_channel_turns([to_message(t) for t in v["input"]])
    assert [to_turn(m) for m in normalized] == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "normalize_cached_channel_turns"))
def test_normalize_cached_channel_turns_on_string_turns(v: dict[str, Any]) -> None:
    turns = copy.deepcopy(v["input"])
    assert normalize_cached_channel_turns(turns) == v["expected"]
    assert turns == v["input"]  # the input is not modified


@pytest.mark.parametrize("v", vectors(FILE, "proactive_trim_turns"))
def test_proactive_trim_turns(v: dict[str, Any]) -> None:
    turns = [to_message(t) for t in v["input"]["turns"]]
    dropped = proactive_trim_turns(turns, v["input"]["budget"])
    assert {"dropped": dropped, "turns": [to_turn(m) for m in turns]} == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "proactive_trim_turns"))
def test_proactive_trim_turns_on_string_turns(v: dict[str, Any]) -> None:
    turns = copy.deepcopy(v["input"]["turns"])
    dropped = proactive_trim_turns(turns, v["input"]["budget"])
    assert {"dropped": dropped, "turns": turns} == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "channel_message_timeout_budget_secs"))
def test_channel_message_timeout_budget_secs(v: dict[str, Any]) -> None:
    i = v["input"]
    extra = {"scale_cap": i["scale_cap"]} if "scale_cap" in i else {}
    assert message_timeout_budget_secs(i["message_timeout_secs"], i["max_tool_iterations"],
                                       **extra) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "should_skip_memory_context_entry"))
def test_should_skip_memory_context_entry(v: dict[str, Any]) -> None:
    assert should_skip_memory_context_entry(v["input"]["key"], v["input"]["content"]) is v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "is_stop_command"))
def test_is_stop_command(v: dict[str, Any]) -> None:
    assert is_stop_command(v["input"]) is v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "interruption_scope_key"))
def test_interruption_scope_key(v: dict[str, Any]) -> None:
    i = v["input"]
    key = interruption_scope_key(i["channel"], i["reply_target"], i["sender"],
                                 i.get("interruption_scope_id"))
    assert key == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "conversation_memory_key"))
def test_conversation_memory_key(v: dict[str, Any]) -> None:
    i = v["input"]
    key = conversation_memory_key(i["channel"], i["sender"], i["id"], i.get("thread_ts"))
    assert key == v["expected"]


def test_every_vector_function_is_tested_or_deliberately_not_ported() -> None:
    fns = {v.values[0]["fn"] for v in vectors(FILE) if v.values[0] is not None}
    if not fns:
        pytest.skip(f"{FILE} absent")
    assert fns <= TESTED | NOT_PORTED  # a new upstream function needs a test or a reason
    assert NOT_PORTED <= fns  # an exemption whose vectors are gone should go too
