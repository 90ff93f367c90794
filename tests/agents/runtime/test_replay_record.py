"""Continuing a long record quickly and faithfully: a resumed turn's history is the one the turn
had (its compactions made again where it made them), recorded calls are read from the record only
as far as a call needs (``ReplayBook``), and the loop detector sees the calls it judges by."""

from __future__ import annotations

from typing import Any

from agents.runtime.dispatch import NativeToolDispatcher
from agents.runtime.events import Compacted, LoopDetected, RecordingObserver
from agents.runtime.loop import CompactionSettings, Resume, TurnConfig, TurnStatus, run_turn
from agents.runtime.loop.conversation import Conversation
from agents.runtime.messages import Message, Role, ToolResultBlock
from agents.runtime.replay import (
    REFUSED_OUTPUT,
    RecordedCall,
    RecordPage,
    ReplayBook,
    ReplayTool,
    pages_of,
)
from agents.runtime.tools import ALLOW, ASK, FunctionTool

from .scripted_provider import FakeScriptedProvider, answer, calls
from .test_resume import fixed_clock

ASK_TEXT = "Read the pages one by one."


def cfg(**overrides: Any) -> TurnConfig:
    return TurnConfig(**{"model": "fake-model", "system_prompt": "You are helpful.",
                         "compaction": CompactionSettings(enabled=True, preserve_recent=4,
                                                          max_estimated_tokens=300),
                         "max_tool_iterations": 100, "loop_detection": False, **overrides})


def reader(log: list[int] | None = None, *, requires_approval: bool = False) -> FunctionTool:
    async def run(arguments: dict[str, Any]) -> str:
        if log is not None:
            log.append(arguments["n"])
        return f"page {arguments['n']}: " + "lorem ipsum " * 12

    return FunctionTool("read", "Read a page.", run, requires_approval=requires_approval)


def script(iterations: int) -> list[Any]:
    return [*(calls(("read", {"n": n}, f"call_{n}")) for n in range(1, iterations + 1)),
            answer("All read.")]


def compactions(observer: RecordingObserver) -> int:
    return sum(isinstance(e, Compacted) for e in observer.events)


# -- the history a resumed turn continues with ---------------------------------------------------
async def test_a_resumed_turn_sends_the_request_the_whole_turn_sent_at_that_point():
    live = FakeScriptedProvider(script(40))
    observer = RecordingObserver()
    whole = await run_turn(provider=live, config=cfg(), history=[], user_message=ASK_TEXT,
                           tools=[reader()], observer=observer, clock=fixed_clock)
    assert whole.status is TurnStatus.COMPLETED
    assert compactions(observer) >= 3  # it compacted as it went

    # The record up to the 30th iteration's results, continued: the 31st request is the same.
    recorded = whole.new_messages[1:1 + 2 * 30]
    resumed_provider = FakeScriptedProvider(script(40)[30:])
    resumed_observer = RecordingObserver()
    resumed = await run_turn(provider=resumed_provider, config=cfg(), history=[],
                             user_message=ASK_TEXT, tools=[reader()], observer=resumed_observer,
                             clock=fixed_clock, resume=Resume(messages=recorded, iteration=30))

    assert resumed.status is TurnStatus.COMPLETED and resumed.text == "All read."
    first, same = resumed_provider.requests[0], live.requests[30]
    assert first.messages == same.messages
    assert first.system_text == same.system_text
    # The record's compactions are not reported again; every message is kept to be stored.
    assert compactions(resumed_observer) < compactions(observer)
    assert [m.to_dict() for m in resumed.new_messages] == [m.to_dict() for m in whole.new_messages]


def record(iterations: int) -> list[Message]:
    messages = []
    for n in range(1, iterations + 1):
        messages.append(calls(("read", {"n": n}, f"call_{n}")).message)
        messages.append(Message.tool_results([ToolResultBlock(f"call_{n}", f"page {n}", False,
                                                              "read")]))
    return messages


def test_restoring_thousands_of_messages_compacts_them_as_the_turn_went():
    restored = Conversation([], ASK_TEXT, now=fixed_clock(), dispatcher=NativeToolDispatcher(),
                            max_messages=50, observer=RecordingObserver(),
                            compaction=CompactionSettings(max_estimated_tokens=2_000))
    restored.prepare()
    restored.restore(record(2_000))

    assert restored.history[0].role is Role.SYSTEM  # the summary of what was compacted
    assert len(restored.history) < 1_000  # not everything: what the turn had at its end
    assert len(restored.new_messages) == 1 + 4_000
    assert len(restored.wire) == len(restored.history) - 1
    assert restored.next_call == 2_000


def test_without_compaction_everything_restored_is_sent():
    restored = Conversation([], ASK_TEXT, now=fixed_clock(), dispatcher=NativeToolDispatcher(),
                            max_messages=50, observer=RecordingObserver(),
                            compaction=CompactionSettings(enabled=False))
    restored.prepare()
    restored.restore(record(500))
    assert len(restored.history) == len(restored.wire) == 1 + 1_000


# -- the loop detector ---------------------------------------------------------------------------
async def test_the_loop_detector_goes_on_counting_a_long_record():
    # 2,000 different calls, then the same call three times: the next one is a fourth.
    messages = record(2_000)
    for n in range(3):
        messages.append(calls(("read", {"n": 0}, f"call_r{n}")).message)
        messages.append(Message.tool_results([ToolResultBlock(f"call_r{n}", "same", False, "read")]))

    async def same(arguments: dict[str, Any]) -> str:
        return "same"

    provider = FakeScriptedProvider([calls(("read", {"n": 0}, "call_x")), answer("Stopped.")])
    observer = RecordingObserver()
    await run_turn(provider=provider, config=cfg(loop_detection=True, max_tool_iterations=3_000,
                                                 compaction=CompactionSettings(enabled=False)),
                   history=[], user_message=ASK_TEXT, observer=observer, clock=fixed_clock,
                   tools=[FunctionTool("read", "Read a page.", same)],
                   resume=Resume(messages=messages, iteration=2_003))
    levels = [e.level for e in observer.events if isinstance(e, LoopDetected)]
    assert levels == ["block"]  # a fourth identical call in a row


# -- the recorded calls --------------------------------------------------------------------------
def recorded(seq: int, n: int, output: str) -> RecordedCall:
    return RecordedCall(name="read", arguments={"n": n}, output=output, success=True, seq=seq)


def counting(calls_: list[RecordedCall]) -> tuple[Any, list[tuple[int, bool, int]]]:
    reads: list[tuple[int, bool, int]] = []
    inner = pages_of(calls_)

    async def pages(seq: int, backwards: bool, limit: int) -> RecordPage:
        reads.append((seq, backwards, limit))
        return await inner(seq, backwards, limit)

    return pages, reads


async def test_recorded_calls_answer_in_order_after_the_fork_point_then_the_last_again():
    book = ReplayBook.of([recorded(2, 1, "before"), recorded(6, 1, "first"),
                          recorded(8, 2, "other"), recorded(10, 1, "second")], upto=4)
    outputs = [(await book.take("read", {"n": 1})).output for _ in range(4)]
    assert outputs == ["first", "second", "second", "second"]


async def test_a_call_made_only_before_the_fork_point_answers_with_its_latest_result():
    book = ReplayBook.of([recorded(2, 1, "old"), recorded(3, 1, "newer"),
                          recorded(9, 2, "later")], upto=4)
    assert (await book.take("read", {"n": 1})).output == "newer"
    assert await book.take("read", {"n": 3}) is None


async def test_the_record_is_read_only_as_far_as_a_call_needs():
    pages, reads = counting([recorded(seq, seq, f"page {seq}") for seq in range(1, 10_001)])
    book = ReplayBook(pages, upto=5_000)

    assert (await book.take("read", {"n": 5_001})).output == "page 5001"
    assert reads == [(5_000, False, 64)]  # one small page after the fork point

    assert (await book.take("read", {"n": 9_999})).output == "page 9999"
    assert len(reads) <= 5  # pages grow: a far call takes a few reads, not hundreds


async def test_a_new_call_is_asked_for_only_when_it_was_not_recorded():
    book = ReplayBook.of([recorded(6, 1, "first")], upto=4, allow_new=True)
    log: list[int] = []
    tool = ReplayTool(reader(log, requires_approval=True), book)

    await tool.prepare_call({"n": 1})
    assert tool.policy_for({"n": 1}) == ALLOW  # recorded: nothing runs, nobody is asked
    await tool.prepare_call({"n": 2})
    assert tool.policy_for({"n": 2}) == ASK  # new: the tool's own policy

    assert (await tool.execute({"n": 1})).output == "first"
    assert (await tool.execute({"n": 2})).output.startswith("page 2")
    assert log == [2] and (book.replayed, book.ran) == (1, 1)


async def test_a_call_that_was_not_recorded_is_refused_without_reading_further_than_needed():
    pages, reads = counting([recorded(6, 1, "first")])
    tool = ReplayTool(reader(), ReplayBook(pages, upto=4))
    await tool.prepare_call({"n": 2})
    assert reads == []  # no new calls allowed: nothing to look up before deciding
    result = await tool.execute({"n": 2})
    assert not result.success and result.output == REFUSED_OUTPUT
