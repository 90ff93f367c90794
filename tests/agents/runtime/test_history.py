from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agents.runtime.history import (
    COMPACT_CONTINUATION_PREAMBLE,
    compact,
    emergency_history_trim,
    estimate_tokens,
    fast_trim_tool_results,
    recover_context,
    remove_orphaned_tool_results,
    should_compact,
    summarize_messages,
    trim_history,
    truncate_tool_result,
)
from agents.runtime.messages import (
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agents.runtime.pricing import Usage
from agents.runtime.upstream_ports import (
    auto_compact,
    estimate_history_tokens,
    normalize_cached_channel_turns,
    parse_auto_compaction_threshold,
    proactive_trim_turns,
)


def call(*ids: str, text: str = "") -> Message:
    """An assistant message calling one tool per id (several tool_use blocks per message)."""
    blocks = [TextBlock(text)] if text else []
    blocks += [ToolUseBlock(id=i, name=f"tool_{i}", input={"arg": i}) for i in ids]
    return Message(Role.ASSISTANT, blocks)


def results(*ids: str, output: str = "ok") -> Message:
    return Message.tool_results(
        [ToolResultBlock(tool_use_id=i, output=f"{output} {i}", name=f"tool_{i}") for i in ids])


def assert_pairs_intact(history: list[Message]) -> None:
    """Every tool result answers a tool_use earlier in the history, and a tool message follows
    an assistant tool call or another tool message."""
    seen: set[str] = set()
    for index, message in enumerate(history):
        seen.update(b.id for b in message.tool_uses)
        for block in message.tool_results_blocks:
            assert block.tool_use_id in seen, f"orphan result {block.tool_use_id} at {index}"
        if message.role == Role.TOOL:
            previous = history[index - 1]
            assert previous.tool_uses or previous.role == Role.TOOL


# -- trim_history -------------------------------------------------------------------------------
def test_trim_keeps_the_system_prompt_and_a_compaction_summary() -> None:
    summary = compact([Message.user("x " * 50)] * 6, preserve_recent=1,
                      max_estimated_tokens=0).messages[0]
    history = [Message.system("prompt"), summary] + [Message.user(f"m{i}") for i in range(10)]
    trim_history(history, 3)
    assert [m.text for m in history[:2]] == ["prompt", summary.text]
    assert [m.text for m in history[2:]] == ["m7", "m8", "m9"]


def test_trim_drops_results_whose_parallel_tool_calls_were_cut() -> None:
    history = [Message.user("go"), call("a", "b"), results("a", "b"), Message.assistant("done"),
               Message.user("again"), call("c", "d", "e"), results("c", "d", "e"),
               Message.assistant("done again")]
    trim_history(history, 2)  # the cut lands between call(c, d, e) and its results
    assert [m.text for m in history] == ["done again"]
    assert_pairs_intact(history)


def test_trim_never_starts_with_an_orphan_for_any_cap() -> None:
    history = [Message.user("go"), call("a", "b"), results("a", "b"), call("c"), results("c"),
               Message.assistant("done"), Message.user("more"), call("d", "e"), results("d", "e")]
    for cap in range(len(history) + 1):
        trimmed = trim_history(list(history), cap)
        assert len(trimmed) <= cap
        assert_pairs_intact(trimmed)


def test_trim_to_zero_keeps_only_system_and_changes_the_list_in_place() -> None:
    history = [Message.system("prompt"), Message.user("a"), Message.assistant("b")]
    same = trim_history(history, 0)
    assert same is history
    assert [m.role for m in history] == [Role.SYSTEM]


# -- truncate_tool_result -----------------------------------------------------------------------
def test_truncation_cuts_multibyte_text_on_character_boundaries() -> None:
    text = "€" * 10  # 3 bytes each: 30 bytes
    # head: 6 bytes (two €); tail: 4 bytes rounded up to the next boundary, one €.
    assert truncate_tool_result(text, 10) == "€€\n\n[... 21 characters truncated ...]\n\n€"


def test_truncation_survives_lone_surrogates_in_tool_output() -> None:
    output = b"caf\xe9 ".decode("utf-8", "surrogateescape") * 50  # undecodable byte kept as-is
    result = truncate_tool_result(output, 30)
    assert result.startswith(output[:5]) and "characters truncated" in result


def test_truncation_with_two_byte_characters_counts_removed_bytes() -> None:
    text = "é" * 20  # 40 bytes
    result = truncate_tool_result(text, 11)  # head 7 -> 6 bytes, tail 4 bytes
    assert result == "ééé\n\n[... 30 characters truncated ...]\n\néé"


@given(st.text(), st.integers(min_value=0, max_value=200))
def test_truncation_keeps_a_head_and_a_tail_of_the_original(text: str, max_bytes: int) -> None:
    result = truncate_tool_result(text, max_bytes)
    data = text.encode()
    if max_bytes == 0 or len(data) <= max_bytes:
        assert result == text
        return
    head, rest = result.split("\n\n[... ", 1)
    count, tail = rest.split(" characters truncated ...]\n\n", 1)
    assert text.startswith(head) and text.endswith(tail)
    assert len(head.encode()) <= max_bytes * 2 // 3
    assert len(tail.encode()) <= max_bytes - max_bytes * 2 // 3
    assert int(count) == len(data) - len(head.encode()) - len(tail.encode())


# -- fast trim, orphans, emergency trim ---------------------------------------------------------
def test_fast_trim_shortens_each_large_result_and_spares_recent_messages() -> None:
    big = "x" * 5000
    old = Message.tool_results([ToolResultBlock("a", big, name="t"),
                                ToolResultBlock("b", "small", name="t")])
    recent = Message.tool_results([ToolResultBlock("c", big, name="t")])
    history = [call("a", "b"), old, Message.assistant("ok"), call("c"), recent]
    saved = fast_trim_tool_results(history, 2)
    trimmed = history[1].tool_results_blocks
    assert len(trimmed[0].output.encode()) < 2100 and trimmed[1].output == "small"
    assert saved == 5000 - len(trimmed[0].output.encode())
    assert old.tool_results_blocks[0].output == big  # the original message is not mutated
    assert history[4] is recent


def test_orphan_removal_keeps_the_results_that_still_have_their_call() -> None:
    history = [Message.tool_results([ToolResultBlock("gone", "x")]), call("a"),
               Message.tool_results([ToolResultBlock("a", "kept"), ToolResultBlock("lost", "x")])]
    removed = remove_orphaned_tool_results(history)
    assert removed == 1
    assert [b.tool_use_id for m in history for b in m.tool_results_blocks] == ["a"]


def test_emergency_trim_drops_a_tool_call_together_with_its_results() -> None:
    history = [Message.system("s"), Message.user("q"), call("a", "b"), results("a", "b"),
               Message.assistant("x"), Message.user("q2"), Message.assistant("y"),
               Message.user("q3"), Message.assistant("z")]
    dropped = emergency_history_trim(history, 4)
    assert dropped == 3  # target 3: the user message, then the call with its results
    assert [m.text for m in history] == ["s", "x", "q2", "y", "q3", "z"]
    assert_pairs_intact(history)


def test_emergency_trim_does_not_split_a_pair_reaching_into_the_recent_messages() -> None:
    history = [Message.user("q"), Message.user("q1"), Message.assistant("a1"), call("a"),
               results("a"), Message.user("q2"), Message.assistant("a2")]
    dropped = emergency_history_trim(history, 3)
    assert dropped == 2  # q and q1; call(a) stops the trim since results(a) is protected
    assert_pairs_intact(history)
    assert len(history) == 5


# -- compaction ---------------------------------------------------------------------------------
def long_conversation() -> list[Message]:
    return [Message.user("Please look at src/app.ts " + "x" * 400), call("a", "b", text="Let me check"),
            results("a", "b"), Message.assistant("Next: fix the parser"),
            Message.user("ok " * 100), call("c"), results("c"), Message.assistant("done")]


def test_compaction_never_separates_tool_calls_from_results() -> None:
    history = long_conversation()
    for preserve in range(1, len(history)):
        result = compact(history, preserve_recent=preserve, max_estimated_tokens=0)
        assert result.messages[0].role == Role.SYSTEM
        assert_pairs_intact(result.messages[1:])
        assert result.removed_message_count + len(result.messages) - 1 == len(history)


def test_compaction_walks_back_over_results_split_across_tool_messages() -> None:
    history = [Message.user("go"), call("a", "b"), results("a"), results("b"),
               Message.assistant("done")]
    result = compact(history, preserve_recent=2, max_estimated_tokens=0)
    assert result.removed_message_count == 1
    assert result.messages[1].tool_uses  # the call is preserved with both results


def test_compaction_that_would_only_split_a_pair_changes_nothing() -> None:
    history = [call("a", "b"), results("a", "b")]
    result = compact(history, preserve_recent=1, max_estimated_tokens=0)
    assert result.removed_message_count == 0 and result.summary == ""
    assert result.messages == history


def test_compaction_keeps_a_leading_system_prompt_first() -> None:
    history = [Message.system("You are helpful."), *long_conversation()]
    result = compact(history, preserve_recent=2, max_estimated_tokens=0)
    assert result.messages[0].text == "You are helpful."
    assert result.messages[1].text.startswith(COMPACT_CONTINUATION_PREAMBLE)
    # Compacting again finds only the preserved call and its results: nothing to remove.
    again = compact(result.messages, preserve_recent=2, max_estimated_tokens=0)
    assert again.removed_message_count == 0 and again.messages == result.messages


def test_summary_lists_tools_pending_work_files_and_timeline() -> None:
    summary = summarize_messages(long_conversation()[:4] + [
        Message.tool_results([ToolResultBlock("z", "no name recorded")]),
        Message(Role.ASSISTANT, [ThinkingBlock("hmm" * 10, signature="sig")])])
    lines = summary.split("\n")
    assert "- Scope: 6 earlier messages compacted (user=1, assistant=3, tool=2)." in lines
    assert "- Tools mentioned: tool_a, tool_b." in lines
    assert "- Pending work:" in lines and "  - Next: fix the parser" in lines
    assert "- Key files referenced: src/app.ts." in lines
    assert '  - assistant: Let me check | tool_use tool_a({"arg":"a"}) | tool_use tool_b({"arg":"b"})' in lines
    assert "  - assistant: thinking (30 chars)" in lines


def test_recompaction_merges_the_earlier_summary() -> None:
    first = compact(long_conversation(), preserve_recent=2, max_estimated_tokens=0)
    history = first.messages + [Message.user("Also handle README.md"), Message.assistant("sure"),
                                Message.user("thanks"), Message.assistant("bye")]
    second = compact(history, preserve_recent=2, max_estimated_tokens=0)
    text = second.formatted_summary
    assert text.startswith("Summary:\nConversation summary:\n- Previously compacted context:\n"
                           "  - Scope: 5 earlier messages compacted")
    assert "- Newly compacted context:\n  - Scope: 5 earlier messages compacted" in text
    assert "  - Key files referenced: README.md." not in text  # no '/' in it: not a path
    assert "- - " not in text
    assert second.removed_message_count == 5
    assert sum(m.text.startswith(COMPACT_CONTINUATION_PREAMBLE) for m in second.messages) == 1


def test_should_compact_uses_the_default_threshold_and_preserved_count() -> None:
    big = [Message.user("y" * 8000) for _ in range(5)]  # 2001 tokens each
    assert should_compact(big)
    assert not should_compact(big[:4])  # nothing beyond the 4 preserved messages
    assert not should_compact([Message.user("small")] * 10)


def test_estimates_count_blocks_with_compact_json_and_utf8_bytes() -> None:
    message = Message(Role.ASSISTANT, [
        TextBlock("€" * 4),  # 12 bytes -> 3 + 1
        ThinkingBlock("abcdefgh", signature="sig1"),  # 2 + (1 + 1)
        ToolUseBlock(id="1", name="bash", input={"command": "ls"}),  # (4 + 16) // 4 + 1
    ])
    assert estimate_tokens([message]) == 4 + 4 + 6
    assert estimate_history_tokens([Message.user("€")]) == 1 + 4


def test_auto_compaction_waits_for_the_threshold() -> None:
    history = long_conversation()
    assert auto_compact(history, cumulative_input_tokens=99_999) is None
    result = auto_compact(history, cumulative_input_tokens=100_000)
    assert result is not None and result.removed_message_count == 4


def test_threshold_parsing_is_strict() -> None:
    assert parse_auto_compaction_threshold("+5") == 5
    for junk in (" 5", "5 ", "-1", "1_000", "4294967296", "", "1e3"):
        assert parse_auto_compaction_threshold(junk) == 100_000


# -- overflow recovery --------------------------------------------------------------------------
def test_recovery_trims_large_tool_results_first() -> None:
    history = [call("a"), results("a", output="z" * 9000)] + [Message.user("u")] * 4
    recovery = recover_context(history)
    assert recovery.stage == "fast_trim" and recovery.bytes_saved > 6000
    assert len(history) == 6


def test_recovery_compacts_when_there_is_nothing_to_truncate() -> None:
    history = long_conversation()
    assert recover_context(history)
    assert history[0].text.startswith(COMPACT_CONTINUATION_PREAMBLE)
    assert len(history) == 5  # the summary plus the 4 preserved messages
    assert_pairs_intact(history[1:])


def test_recovery_reports_when_nothing_can_be_removed() -> None:
    history = [call("a", "b", "c", "d", "e"), *[results(i) for i in "abcde"]]
    before = list(history)
    assert not recover_context(history)
    assert history == before


# -- channel hygiene ----------------------------------------------------------------------------
def test_normalize_merges_interrupted_turns_and_their_usage() -> None:
    first = Message.assistant("part 1", usage=Usage(input_tokens=10, output_tokens=2))
    second = Message.assistant("part 2", usage=Usage(input_tokens=5, output_tokens=1))
    turns = normalize_cached_channel_turns(
        [Message.user("a"), Message.user("b"), Message.user(""), first, second])
    assert [m.text for m in turns] == ["a\n\nb", "part 1\n\npart 2"]
    assert turns[1].usage == Usage(input_tokens=15, output_tokens=3)


def test_normalize_keeps_a_user_turn_after_tool_results_separate() -> None:
    history = [Message.user("q"), call("a"), results("a"), Message.user("hello?")]
    normalized = normalize_cached_channel_turns(history)
    assert normalized == history


def test_proactive_trim_never_leaves_a_tool_result_first() -> None:
    history = [Message.user("q" * 10), call("a", text="t" * 100), results("a", output="r" * 10),
               Message.assistant("done")]
    dropped = proactive_trim_turns(history, 40)  # dropping the call leaves its result first
    assert dropped == 3
    assert [m.text for m in history] == ["done"]
