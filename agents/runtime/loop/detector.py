"""Loop detection and duplicate calls: when the model keeps asking for the same thing.

``LoopDetector`` watches the calls of the whole turn; ``call_signature`` decides which calls of
one response are the same call.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from ..messages import ToolUseBlock


class LoopDetector:
    """Repeated tool calls in a sliding window (default 20): the same tool, arguments and output
    3 times in a row warns, 4 times blocks (the output is replaced), 5 times breaks the turn.
    Two tools alternating for 4 cycles, or one tool giving the same output for 5 calls with
    different arguments, escalate the same way."""

    def __init__(self, *, window: int = 20, max_repeats: int = 3) -> None:
        self.max_repeats = max_repeats
        self.window = window  # what it judges by: the last ``window`` calls
        self._window: deque[tuple[str, str, int]] = deque(maxlen=window)

    def record(self, name: str, arguments: Any, output: str) -> tuple[str, str] | None:
        self._window.append((name, _canonical_json(arguments), hash(output)))
        return self._exact_repeat() or self._ping_pong() or self._no_progress()

    def _exact_repeat(self) -> tuple[str, str] | None:
        last = self._window[-1]
        count = 0
        for entry in reversed(self._window):
            if entry != last:
                break
            count += 1
        limit = self.max_repeats
        if count >= limit + 2:
            return "break", (f"Circuit breaker: tool '{last[0]}' called {count} times consecutively "
                             "with identical arguments and output")
        if count > limit:
            return "block", (f"Blocked: tool '{last[0]}' called {count} times consecutively with "
                             "identical arguments and output")
        if count >= limit:
            return "warning", (f"Warning: tool '{last[0]}' has been called {count} times "
                               "consecutively with identical arguments and output. Try a different "
                               "approach.")
        return None

    def _ping_pong(self) -> tuple[str, str] | None:
        min_cycles = 4
        entries = list(reversed(self._window))
        if len(entries) < min_cycles * 2:
            return None
        a, b = entries[0][0], entries[1][0]
        if a == b:
            return None
        length = 0
        for i, entry in enumerate(entries):
            if entry[0] != (a if i % 2 == 0 else b):
                break
            length += 1
        cycles = length // 2
        if cycles < min_cycles:
            return None
        if cycles >= min_cycles + 2:
            return "break", f"Circuit breaker: tools '{a}' and '{b}' have been alternating for {cycles} cycles"
        if cycles > min_cycles:
            return "block", f"Blocked: tools '{a}' and '{b}' have been alternating for {cycles} cycles"
        return "warning", (f"Warning: tools '{a}' and '{b}' appear to be alternating ({cycles} "
                           "cycles). Consider a different strategy.")

    def _no_progress(self) -> tuple[str, str] | None:
        min_calls = 5
        name, _, output = self._window[-1]
        run = []
        for entry in reversed(self._window):
            if entry[0] != name or entry[2] != output:
                break
            run.append(entry)
        count = len(run)
        if count < min_calls or len({e[1] for e in run}) < 2:
            return None
        if count >= min_calls + 2:
            return "break", (f"Circuit breaker: tool '{name}' called {count} times with different "
                             "arguments but identical results — no progress")
        if count > min_calls:
            return "block", (f"Blocked: tool '{name}' called {count} times with different "
                             "arguments but identical results")
        return "warning", (f"Warning: tool '{name}' called {count} times with different arguments "
                           "but identical results. The current approach may not be making progress.")


def _canonical_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def call_signature(call: ToolUseBlock) -> tuple[str, str]:
    """What makes two calls of one response duplicates: the trimmed, lowercased name and the
    arguments as JSON with keys sorted."""
    return call.name.strip().lower(), _canonical_json(call.input)
