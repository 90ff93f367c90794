from __future__ import annotations

from agents.runtime.messages import (
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)


def test_text_runs_a_tool_call_separates_are_separate_paragraphs():
    message = Message(Role.ASSISTANT, [
        TextBlock("First."), ToolUseBlock("t1", "calculator", {}), TextBlock("Second."),
        ToolUseBlock("t2", "calculator", {}), TextBlock("Third.")])

    assert message.text == "First.\n\nSecond.\n\nThird."


def test_adjacent_text_blocks_are_one_run_as_written():
    # One answer split into blocks (Anthropic does this around citations) stays one sentence.
    message = Message(Role.ASSISTANT, [TextBlock("The sky is "), TextBlock("blue.")])

    assert message.text == "The sky is blue."


def test_blocks_before_the_first_text_or_empty_text_add_no_separator():
    message = Message(Role.ASSISTANT, [
        ThinkingBlock("plan", "sig"), TextBlock("Answer."), ToolUseBlock("t1", "x", {}),
        TextBlock(""), ToolUseBlock("t2", "x", {})])

    assert message.text == "Answer."
