"""compaction.json: Claw Code's compaction and estimates, ZeroClaw's history estimate."""

from __future__ import annotations

from typing import Any

import pytest

from agents.runtime.history import (
    collect_key_files,
    compact,
    estimate_tokens,
    format_compact_summary,
    get_compact_continuation_message,
    infer_pending_work,
    should_compact,
    summarize_block,
    tool_input_text,
)
from agents.runtime.messages import (
    Block,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    block_from_dict,
)
from agents.runtime.pricing import Usage
from agents.runtime.upstream_ports import (
    UsageTracker,
    auto_compact,
    estimate_history_tokens,
    estimate_session_tokens,
    parse_auto_compaction_threshold,
)
from tests.agents.runtime.conformance import vectors

FILE = "compaction.json"

MERGE_QUIRK = (
    "Claw Code flattens the earlier summary's highlights with a '- ' prefix ('- - Scope: ...', "
    "'-   - Investigate ...'), losing their nesting; we keep them under '- Previously compacted "
    "context:' (test_recompaction_keeps_previous_context_under_its_own_heading)"
)


def to_message(data: dict[str, Any]) -> Message:
    return Message.from_dict({"role": data["role"], "blocks": data["blocks"]})


def block_to_vector(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"text": block.text, "type": "text"}
    if isinstance(block, ToolUseBlock):
        return {"id": block.id, "input": tool_input_text(block), "name": block.name,
                "type": "tool_use"}
    if isinstance(block, ToolResultBlock):
        return {"is_error": block.is_error, "output": block.output, "tool_name": block.name,
                "tool_use_id": block.tool_use_id, "type": "tool_result"}
    assert isinstance(block, ThinkingBlock)
    return {"thinking": block.thinking, "type": "thinking"}


def to_vector(message: Message) -> dict[str, Any]:
    return {"blocks": [block_to_vector(b) for b in message.blocks], "role": str(message.role)}


def config(v: dict[str, Any]) -> dict[str, int]:
    cfg = v["input"].get("config") or {}
    kwargs = {}
    if "preserve_recent_messages" in cfg:
        kwargs["preserve_recent"] = cfg["preserve_recent_messages"]
    if "max_estimated_tokens" in cfg:
        kwargs["max_estimated_tokens"] = cfg["max_estimated_tokens"]
    return kwargs


def result_to_vector(result: Any) -> dict[str, Any]:
    return {
        "compacted_messages": [to_vector(m) for m in result.messages],
        "formatted_summary": result.formatted_summary,
        "removed_message_count": result.removed_message_count,
        "summary": result.summary,
    }


@pytest.mark.parametrize("v", vectors(FILE, "format_compact_summary"))
def test_format_compact_summary(v: dict[str, Any]) -> None:
    assert format_compact_summary(v["input"]) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "compact_session"))
def test_compact_session(v: dict[str, Any]) -> None:
    messages = [to_message(m) for m in v["input"]["messages"]]
    assert result_to_vector(compact(messages, **config(v))) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "compact_session"))
def test_compact_session_accepts_block_dicts(v: dict[str, Any]) -> None:
    assert result_to_vector(compact(v["input"]["messages"], **config(v))) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "should_compact"))
def test_should_compact(v: dict[str, Any]) -> None:
    messages = [to_message(m) for m in v["input"]["messages"]]
    assert should_compact(messages, **config(v)) is v["expected"]


def _compact_twice(v: dict[str, Any]) -> tuple[Any, Any]:
    first = compact([to_message(m) for m in v["input"]["messages"]], **config(v))
    follow_up = [to_message(m) for m in v["input"]["follow_up"]]
    return first, compact(first.messages + follow_up, **config(v))


@pytest.mark.parametrize("v", vectors(FILE, "compact_twice", skip={
    "cc.compact.keeps_previous_compacted_context_when_compacting_again": MERGE_QUIRK}))
def test_compact_twice(v: dict[str, Any]) -> None:
    first, second = _compact_twice(v)
    assert {**result_to_vector(second), "first_summary": first.summary} == v["expected"]


def _without_quirk(text: str) -> str:
    """The vector's merged summary with the earlier highlights nested under their heading."""
    out: list[str] = []
    for line in text.split("\n"):
        if line.startswith(("- - ", "-   ")):
            if "- Previously compacted context:" not in out:
                out.append("- Previously compacted context:")
            out.append("  " + line[2:])
        else:
            out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("v", vectors(FILE, "compact_twice"))
def test_recompaction_keeps_previous_context_under_its_own_heading(v: dict[str, Any]) -> None:
    # Deliberate deviation from the vector keeps_previous_compacted_context_when_compacting_again.
    first, second = _compact_twice(v)
    expected = v["expected"]
    assert first.summary == expected["first_summary"]
    assert second.removed_message_count == expected["removed_message_count"]
    assert [to_vector(m) for m in second.messages[1:]] == expected["compacted_messages"][1:]
    assert second.summary == _without_quirk(expected["summary"])
    assert second.formatted_summary == _without_quirk(expected["formatted_summary"])
    assert "- - " not in second.summary
    assert second.messages[0].text == _without_quirk(expected["compacted_messages"][0]["blocks"][0]["text"])
    assert "  - Scope: 2 earlier messages compacted" in second.summary.split(
        "- Newly compacted context:")[0]


@pytest.mark.parametrize("v", vectors(FILE, "get_compact_continuation_message"))
def test_get_compact_continuation_message(v: dict[str, Any]) -> None:
    i = v["input"]
    assert get_compact_continuation_message(
        i["summary"], i["suppress_follow_up_questions"], i["recent_messages_preserved"],
    ) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "summarize_block"))
def test_summarize_block(v: dict[str, Any]) -> None:
    assert summarize_block(block_from_dict(v["input"])) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "collect_key_files"))
def test_collect_key_files(v: dict[str, Any]) -> None:
    assert collect_key_files([to_message(m) for m in v["input"]]) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "infer_pending_work"))
def test_infer_pending_work(v: dict[str, Any]) -> None:
    assert infer_pending_work([to_message(m) for m in v["input"]]) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "estimate_session_tokens"))
def test_estimate_session_tokens(v: dict[str, Any]) -> None:
    messages = [to_message(m) for m in v["input"]["messages"]]
    assert estimate_tokens(messages) == v["expected"]
    assert estimate_session_tokens(messages) == v["expected"]
    assert estimate_tokens(v["input"]["messages"]) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "estimate_history_tokens"))
def test_estimate_history_tokens(v: dict[str, Any]) -> None:
    assert estimate_history_tokens(v["input"]) == v["expected"]
    assert estimate_tokens(v["input"]) == v["expected"]
    messages = [Message(Role(t["role"]), [TextBlock(t["content"])]) for t in v["input"]]
    assert estimate_history_tokens(messages) == v["expected"]


@pytest.mark.parametrize("v", vectors(FILE, "parse_auto_compaction_threshold"))
def test_parse_auto_compaction_threshold(v: dict[str, Any]) -> None:
    assert parse_auto_compaction_threshold(v["input"]) == v["expected"]


def usage_to_vector(usage: Usage, *, total: bool) -> dict[str, int]:
    data = {"cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    return {**data, "total_tokens": usage.total_tokens} if total else data


@pytest.mark.parametrize("v", vectors(FILE, "usage_tracker"))
def test_usage_tracker_stays_below_the_auto_compaction_threshold(v: dict[str, Any]) -> None:
    tracker = UsageTracker()
    for usage in v["input"]:
        tracker.record(Usage.from_anthropic(usage))
    assert {"cumulative": usage_to_vector(tracker.cumulative, total=True),
            "current": usage_to_vector(tracker.current, total=False),
            "turns": tracker.turns} == v["expected"]
    # skips_auto_compaction_below_threshold: 99,999 cumulative input tokens do not compact.
    history = [Message.user(f"message {i}") for i in range(8)]
    assert auto_compact(history, cumulative_input_tokens=tracker.cumulative.input_tokens) is None
    assert auto_compact(history, cumulative_input_tokens=100_000).removed_message_count == 4
