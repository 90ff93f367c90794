"""Replaying a turn's recorded tool results: a run forked from a stored turn calls tools through
``ReplayTool``, which answers a call that was recorded (same tool, same arguments) with the
recorded result instead of running the tool, so the fork has no side effects.

A call that was not recorded is refused with ``REFUSED_OUTPUT`` unless the person allowed new
calls (``ReplayBook.allow_new``); then it runs for real, with the tool's own policy (a tool
that needs approval is put to a person). A recorded call never waits for an approval: nothing
runs.

Recorded calls are matched in the order they were made: the first call with given arguments gets
the first recorded result of that call after the fork point, the second the second, and so on;
once they are all used the last one answers again (the recorded world does not change). Calls
before the fork point (already part of the fork's copied history) answer only when no later one
does: the last of them.

The record is read lazily, a page at a time, only as far as a call needs (``RecordPages``): a
fork of a turn of thousands of calls does not load them all before its first request.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .tools import ALLOW, DENY, Tool, ToolResult

REFUSED_OUTPUT = ("Not run: this is a replay and the call was not recorded; fork with new tool "
                  "calls allowed to run it.")


def call_key(name: str, arguments: dict[str, Any]) -> tuple[str, str]:
    """The identity of a call for matching: its tool and its arguments, key order ignored."""
    try:
        text = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(arguments)
    return name, text


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """A tool call of the stored turn and how it ended. ``seq``: its step in that trace."""

    name: str
    arguments: dict[str, Any]
    output: str
    success: bool
    error: str = ""
    seq: int = 0


# One page of the record: the recorded calls of the steps read, in the order read, and the seq
# the next page goes on from (None: the record ends there).
RecordPage = tuple[list[RecordedCall], int | None]
# Reads the record: ``(seq, backwards, limit)`` -> the calls of at most ``limit`` steps after
# ``seq`` in order, or, ``backwards``, before it from the latest.
RecordPages = Callable[[int, bool, int], Awaitable[RecordPage]]

FIRST_PAGE = 64
MAX_PAGE = 4096


def pages_of(calls: Iterable[RecordedCall]) -> RecordPages:
    """A record held in memory, read like a stored one."""
    ordered = sorted(calls, key=lambda c: c.seq)

    async def pages(seq: int, backwards: bool, limit: int) -> RecordPage:
        if backwards:
            found = [c for c in reversed(ordered) if c.seq < seq][:limit]
        else:
            found = [c for c in ordered if c.seq > seq][:limit]
        return found, (found[-1].seq if len(found) == limit else None)

    return pages


class ReplayBook:
    """The recorded calls of a stored turn, for one forked run: ``pages`` reads the record,
    ``upto`` is the fork point (the last step the fork copied)."""

    def __init__(self, pages: RecordPages, *, upto: int = 0, allow_new: bool = False) -> None:
        self.pages = pages
        self.allow_new = allow_new
        self.replayed = self.refused = self.ran = 0
        self._lock = asyncio.Lock()
        # Read after the fork point and not used yet, by call.
        self._fresh: dict[tuple[str, str], deque[RecordedCall]] = {}
        self._after: int | None = upto  # where reading after the fork point goes on
        self._last: dict[tuple[str, str], RecordedCall] = {}  # the last one used, by call
        # Before the fork point: the latest of each call, as far as read backwards.
        self._before_fork: dict[tuple[str, str], RecordedCall] = {}
        self._before: int | None = upto + 1
        self._page = {False: FIRST_PAGE, True: FIRST_PAGE}

    @classmethod
    def of(cls, calls: Iterable[RecordedCall], *, upto: int = 0,
           allow_new: bool = False) -> ReplayBook:
        return cls(pages_of(calls), upto=upto, allow_new=allow_new)

    def recorded(self, name: str, arguments: dict[str, Any]) -> bool:
        """Whether this call has a recorded result, as far as the record has been read
        (``look_up`` reads as far as needed)."""
        key = call_key(name, arguments)
        return bool(self._fresh.get(key)) or key in self._last or key in self._before_fork

    async def look_up(self, name: str, arguments: dict[str, Any]) -> bool:
        """Whether this call has a recorded result (reading the record as far as needed)."""
        key = call_key(name, arguments)
        async with self._lock:
            if not await self._read_after(key) and key not in self._last:
                await self._read_before(key)
        return self.recorded(name, arguments)

    async def take(self, name: str, arguments: dict[str, Any]) -> RecordedCall | None:
        """The recorded result for this call, or None when it was never recorded."""
        key = call_key(name, arguments)
        async with self._lock:
            if await self._read_after(key):
                call = self._fresh[key].popleft()
                self._last[key] = call
                return call
            if key in self._last:
                return self._last[key]
            await self._read_before(key)
            return self._before_fork.get(key)

    async def _read_after(self, key: tuple[str, str]) -> bool:
        while not self._fresh.get(key) and self._after is not None:
            calls, self._after = await self._next_page(self._after, backwards=False)
            for call in calls:
                self._fresh.setdefault(call_key(call.name, call.arguments), deque()).append(call)
        return bool(self._fresh.get(key))

    async def _read_before(self, key: tuple[str, str]) -> None:
        while key not in self._before_fork and self._before is not None:
            calls, self._before = await self._next_page(self._before, backwards=True)
            for call in calls:
                self._before_fork.setdefault(call_key(call.name, call.arguments), call)

    async def _next_page(self, seq: int, *, backwards: bool) -> RecordPage:
        # Pages grow, so a call far into a long record takes a few reads, not hundreds.
        limit = self._page[backwards]
        self._page[backwards] = min(limit * 4, MAX_PAGE)
        return await self.pages(seq, backwards, limit)


class ReplayTool(Tool):
    """``inner`` as a fork sees it: recorded calls answered from ``book``, others refused or,
    when the book allows new calls, run."""

    def __init__(self, inner: Tool, book: ReplayBook) -> None:
        self.inner = inner
        self.book = book
        self.name = inner.name
        self.description = inner.description
        self.parameters = inner.parameters
        self.policy = inner.policy
        self.policy_reason = inner.policy_reason
        self.policy_source = inner.policy_source
        self.step_meta = inner.step_meta
        self.arguments_problem = inner.arguments_problem
        self.idempotent = inner.idempotent

    async def prepare_call(self, arguments: dict[str, Any]) -> None:
        if self.book.allow_new:  # whether a person is asked depends on the record
            await self.book.look_up(self.name, arguments)

    def policy_for(self, arguments: dict[str, Any]) -> str:
        policy = self.inner.policy_for(arguments)
        if policy == DENY:
            return DENY
        if self.book.recorded(self.name, arguments) or not self.book.allow_new:
            return ALLOW  # nothing runs: a recorded result or a refusal, no one to ask
        return policy

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        recorded = await self.book.take(self.name, arguments)
        if recorded is not None:
            self.book.replayed += 1
            meta = {"replayed": True, "recorded_seq": recorded.seq}
            if recorded.success:
                return ToolResult(True, recorded.output, None, meta)
            return ToolResult(False, recorded.output, recorded.error or recorded.output, meta)
        if not self.book.allow_new:
            self.book.refused += 1
            return ToolResult(False, REFUSED_OUTPUT, REFUSED_OUTPUT, {"replay_refused": True})
        self.book.ran += 1
        result = await self.inner.execute(arguments)
        if not isinstance(result, ToolResult):
            result = ToolResult.ok(str(result))
        return ToolResult(result.success, result.output, result.error,
                          {**result.meta, "replay_new_call": True})


def replay_tools(tools: Iterable[Tool], book: ReplayBook) -> list[Tool]:
    return [ReplayTool(tool, book) for tool in tools]
