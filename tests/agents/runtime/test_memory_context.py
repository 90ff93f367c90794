from __future__ import annotations

from agents.runtime.memory_context import (
    MemoryItem,
    build_memory_context,
    should_skip_memory_context_entry,
    truncate_with_ellipsis,
)


def test_block_format_is_exact() -> None:
    items = [MemoryItem("city", "Lisbon", score=0.9), MemoryItem("pet", "a cat named Tofu")]
    assert build_memory_context(items) == (
        "[Memory context]\n- city: Lisbon\n- pet: a cat named Tofu\n[/Memory context]\n\n")


def test_nothing_relevant_gives_an_empty_string() -> None:
    assert build_memory_context([]) == ""
    assert build_memory_context([MemoryItem("k", "weak", score=0.39)]) == ""
    assert build_memory_context([MemoryItem("assistant_resp", "my own words")]) == ""


def test_relevance_filter_runs_before_the_cap_and_skips_do_not_count() -> None:
    items = [MemoryItem(f"low{i}", "x", score=0.1) for i in range(5)]
    items += [MemoryItem("chat_history", "[...]", score=0.9),
              MemoryItem("img", "[IMAGE:/tmp/a.png]", score=0.9)]
    items += [MemoryItem(f"good{i}", f"fact {i}", score=0.5) for i in range(6)]
    block = build_memory_context(items)
    assert [line.split(":")[0] for line in block.splitlines()[1:-2]] == [
        "- good0", "- good1", "- good2", "- good3"]


def test_entries_are_cut_and_the_block_stops_before_the_total_cap() -> None:
    long = MemoryItem("long", "word " * 400)  # 2000 characters
    block = build_memory_context([long] * 6, max_entries=10)
    lines = block.splitlines()[1:-2]
    assert len(lines) == 4  # each line is 811 characters: 4 fit in 4000, a 5th would not
    assert lines[0] == "- long: " + ("word " * 160).rstrip() + "..."
    assert build_memory_context([long] * 6, max_total_chars=1000).count("- long:") == 1


def test_min_relevance_none_keeps_everything_that_is_not_skipped() -> None:
    assert "weak" in build_memory_context([MemoryItem("k", "weak", score=0.0)], min_relevance=None)


def test_skip_rules() -> None:
    assert should_skip_memory_context_entry("Assistant_Resp_2", "x")
    assert should_skip_memory_context_entry("k", "   ")
    assert should_skip_memory_context_entry("k", "[Cron: nightly] done")
    assert should_skip_memory_context_entry("k", "[heartbeat task] ok")
    assert should_skip_memory_context_entry("k", "note distilled_index_sig: abc")
    assert should_skip_memory_context_entry("k", "<tool_result name='x'>1</tool_result>")
    assert should_skip_memory_context_entry("k", "y" * 4001)
    assert not should_skip_memory_context_entry("k", "y" * 4000)
    assert not should_skip_memory_context_entry("assistant_response_style", "short answers")


def test_truncate_with_ellipsis_counts_characters() -> None:
    assert truncate_with_ellipsis("héllo wörld", 6) == "héllo..."
    assert truncate_with_ellipsis("short", 10) == "short"
