"""hooks.json: Claw Code's hook runner (commands through ``sh -lc``, exit codes, stdout parsing,
matchers, order) and ``merge_hook_feedback``, run through ``agents.runtime.hooks``."""

from __future__ import annotations

from typing import Any

import pytest

from agents.runtime.hooks import CommandHook, hook_payload, merge_hook_feedback, run_hooks
from tests.agents.runtime.conformance import vectors

FILE = "hooks.json"
HOOK_LISTS = {"PreToolUse": "pre", "PostToolUse": "post", "PostToolUseFailure": "failure"}


def command_hooks(entries: list[Any]) -> list[CommandHook]:
    return [CommandHook(command=e) if isinstance(e, str)
            else CommandHook(command=e["command"], matcher=e.get("matcher")) for e in entries]


def same_message(actual: str, expected: str) -> bool:
    """``hook_invalid_json`` messages agree but for the JSON parser's own error text (serde's
    "key must be a string …" against Python's): compared up to ``detail=`` and from
    ``stdout_preview=`` on."""
    if not expected.startswith("hook_invalid_json:"):
        return actual == expected
    return (actual.partition(" detail=")[0] == expected.partition(" detail=")[0]
            and actual.partition(" stdout_preview=")[2] == expected.partition(" stdout_preview=")[2])


@pytest.mark.parametrize("vector", vectors(FILE, "run_hooks"))
async def test_run_hooks(vector):
    data = vector["input"]
    event = data["event"]
    payload = hook_payload(event, data["tool_name"], data["tool_input"], data.get("tool_output"),
                           event == "PostToolUseFailure")
    result = (await run_hooks(command_hooks(data.get(HOOK_LISTS[event], [])), event, payload,
                              tool_name=data["tool_name"])).to_dict()
    expected = vector["expected"]
    actual_messages, expected_messages = result.pop("messages"), dict(expected).pop("messages")
    assert result == {k: v for k, v in expected.items() if k != "messages"}
    assert len(actual_messages) == len(expected_messages), actual_messages
    for actual, wanted in zip(actual_messages, expected_messages, strict=True):
        assert same_message(actual, wanted), (actual, wanted)


@pytest.mark.parametrize("vector", vectors(FILE, "merge_hook_feedback"))
def test_merge_hook_feedback(vector):
    data = vector["input"]
    assert merge_hook_feedback(data["messages"], data["output"], data["is_error"]) == vector["expected"]
