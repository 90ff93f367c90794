"""The turn's messages and their size.

Kept three ways: ``history`` (what the next turn starts from), ``new_messages`` (what the
caller stores: the user's raw text, then everything this turn added) and ``wire`` (what the
model is sent: each message in the dispatcher's format, the user's message time-stamped).
``wire`` is appended to with ``history`` and rebuilt only when the history is rewritten
(compaction, recovery from a context overflow, another dispatcher), so a long turn does not
convert its whole history on every request.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .. import history as history_ops
from ..dispatch import ToolDispatcher
from ..events import Compacted, Observer
from ..messages import ImageBlock, Message, Role, TextBlock, ToolUseBlock, close_dangling_tool_uses
from ..providers.base import REQUEST_PARAMS, ChatRequest
from .types import INTERRUPTED_OUTPUT, CompactionInfo, CompactionSettings

_CALL_ID = re.compile(r"^call_(\d+)$")


class Conversation:
    def __init__(self, history: list[Message], user_message: str, *, now: datetime,
                 dispatcher: ToolDispatcher, max_messages: int, compaction: CompactionSettings,
                 observer: Observer, images: Sequence[ImageBlock] = ()) -> None:
        self.history: list[Message] = list(history)
        # the person's message: its text, then the images they attached
        self.user = Message(Role.USER, [TextBlock(user_message), *images])
        self.stamped = Message(Role.USER, [TextBlock(f"[{now:%Y-%m-%d %H:%M:%S %Z}] {user_message}"), *images])
        self.new_messages: list[Message] = []
        self.wire: list[Message] = []
        self.system_messages: list[str] = []
        self.sent_messages = 0  # how many wire messages the last request's trace already holds
        self.tokens = 0  # the running estimate of ``history``
        self.system_tokens = 0  # of its leading system messages, sent in the system prompt
        self.next_call = 0
        self.compactions: list[CompactionInfo] = []
        # The compactable part's size at the last threshold check that found it below: (messages,
        # tokens, ``tokens`` then); None once the history is rewritten.
        self.checked: tuple[int, int, int] | None = None
        # The calls of ``history`` by id, indexed up to its first ``calls_indexed`` messages:
        # a turn's history only grows between rewrites, so each request indexes what was added.
        self.calls: dict[str, ToolUseBlock] = {}
        self.calls_indexed = 0
        self.dispatcher = dispatcher
        self.max_messages = max_messages
        self.compaction = compaction
        self.observer = observer

    def prepare(self) -> None:
        close_dangling_tool_uses(self.history, INTERRUPTED_OUTPUT)
        self.next_call = _highest_call_number(self.history)
        self.history.append(self.user)
        self.new_messages.append(self.user)
        self.history = _trim(self.history, self.max_messages)
        self.tokens = history_ops.estimate_tokens(self.history)
        self.rebuild_wire()

    def restore(self, messages: list[Message]) -> None:
        """Messages a stored turn had added after the user's, as recorded: they join the
        history and the messages to store (they are not reported again), and the ids of new
        calls go on after theirs.

        The history becomes the one the turn had: its threshold compactions are made again
        where it made them, before each of its model requests (each recorded answer), not
        reported again either. So the next request is the one the turn would have sent, and a
        record of thousands of messages is never sent, or summarised, whole."""
        for message in messages:
            if message.role is Role.ASSISTANT:
                self.compact_if_due(rebuild_wire=False)
            self.history.append(message)
            self.new_messages.append(message)
            self.tokens += history_ops.estimate_tokens([message])
        self.rebuild_wire()
        self.next_call = max(self.next_call, _highest_call_number(messages))

    def new_call_id(self) -> str:
        self.next_call += 1
        return f"call_{self.next_call}"

    def calls_by_id(self) -> dict[str, ToolUseBlock]:
        """The calls already in the conversation (its history as kept), by id. Not to be
        changed: the conversation keeps it up to date (read at every model request, it was
        rebuilt from the whole history each time)."""
        if self.calls_indexed > len(self.history):
            self.calls_forget()
        for message in self.history[self.calls_indexed:]:
            for use in message.tool_uses:
                self.calls[use.id] = use
        self.calls_indexed = len(self.history)
        return self.calls

    def calls_forget(self) -> None:
        """The history was rewritten: index its calls afresh."""
        self.calls, self.calls_indexed = {}, 0

    def use_dispatcher(self, dispatcher: ToolDispatcher) -> None:
        self.dispatcher = dispatcher
        self.rebuild_wire()

    def rebuild_wire(self) -> None:
        self.calls_forget()
        start = 0
        while start < len(self.history) and self.history[start].role is Role.SYSTEM:
            start += 1
        self.system_messages = [m.text for m in self.history[:start] if m.text]
        self.system_tokens = history_ops.estimate_tokens(self.history[:start])
        to_wire = self.dispatcher.to_wire
        self.wire = [self.stamped if m is self.user else to_wire(m) for m in self.history[start:]]
        self.sent_messages = 0

    def append(self, message: Message) -> None:
        self.history.append(message)
        self.new_messages.append(message)
        self.wire.append(self.dispatcher.to_wire(message))
        self.tokens += history_ops.estimate_tokens([message])

    @property
    def wire_tokens(self) -> int:
        """The running estimate of the messages a request sends."""
        return self.tokens - self.system_tokens

    def close_open_calls(self, output: str) -> None:
        """Providers reject a tool call without a result: answer any left open, in the history
        for the next turn and in the messages the caller stores."""
        close_dangling_tool_uses(self.history, output)
        close_dangling_tool_uses(self.new_messages, output)

    def history_for_next_turn(self) -> list[Message]:
        return _trim(list(self.history), self.max_messages)

    def request_trace(self, request: ChatRequest) -> dict[str, Any]:
        """The request for the trace. Messages already in the previous request's trace are not
        repeated: ``messages`` holds the wire messages from ``message_offset`` on."""
        offset = self.sent_messages if self.sent_messages <= len(self.wire) else 0
        trace: dict[str, Any] = {
            "model": request.model,
            "dispatcher": self.dispatcher.name,
            "system": [{"text": b.text, "cacheable": b.cacheable} for b in request.system],
            "tools": [s.name for s in request.tools or []],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            # A caller's other per-request parameters (top_p, stop, seed …), when set.
            **request.sampling(frozenset(REQUEST_PARAMS) - {"temperature", "max_tokens"}),
            "message_offset": offset,
            "messages": [m.to_dict() for m in request.messages[offset:]],
        }
        if offset == 0 and request.tools:
            trace["tool_specs"] = [s.to_dict() for s in request.tools]
        self.sent_messages = len(self.wire)
        return trace

    # -- size ----------------------------------------------------------------------------------------
    async def maybe_compact(self) -> None:
        outcome = self.compact_if_due()
        if outcome is None:
            return
        self.compactions.append(CompactionInfo("threshold", outcome.removed_message_count,
                                               outcome.summary))
        await self.observer.emit(Compacted(reason="threshold",
                                           removed_message_count=outcome.removed_message_count,
                                           summary=outcome.summary))

    def compact_if_due(self, *, rebuild_wire: bool = True) -> history_ops.CompactionResult | None:
        """Compacts the history when it has reached the threshold; the outcome, or None."""
        settings = self.compaction
        # The running estimate only grows by what this turn appended; the exact check runs
        # only once it crosses the threshold.
        if not settings.enabled or self.tokens < settings.max_estimated_tokens:
            return None
        if self.checked is not None:
            # Below the threshold at the last check; appending grows the compactable part by
            # what it adds to the whole, so the exact count is needed only once that crosses it.
            count, tokens, at = self.checked
            if tokens + self.tokens - at < settings.max_estimated_tokens:
                return None
        count, tokens = history_ops.compactable_size(self.history)
        self.checked = (count, tokens, self.tokens)
        if count <= max(settings.preserve_recent, 0) or tokens < settings.max_estimated_tokens:
            return None
        outcome = history_ops.compact(self.history, preserve_recent=settings.preserve_recent,
                                      max_estimated_tokens=settings.max_estimated_tokens)
        if outcome.removed_message_count <= 0:
            return None
        self.history = list(outcome.messages)
        self.after_history_change(rebuild_wire=rebuild_wire)
        return outcome

    def recover(self) -> bool:
        """After a context-overflow error: shorten old tool results, else compact, else drop
        the oldest third (``history.recover_context``, in place)."""
        outcome = history_ops.recover_context(self.history)
        if not outcome:
            return False
        self.after_history_change()
        self.compactions.append(CompactionInfo("context_overflow", outcome.removed_message_count,
                                               outcome.summary))
        return True

    def shorten(self) -> bool:
        """For a request estimated over the model's context window, before it is sent: what
        ``recover`` does, and failing that the oldest earlier turns dropped, down to this turn's
        own messages (the person's message and what answered it so far), which stay. False when
        nothing could be taken away."""
        if self.recover():
            return True
        ours = next((i for i, m in enumerate(self.history) if m is self.user), len(self.history))
        dropped = history_ops.emergency_history_trim(self.history, len(self.history) - ours)
        if not dropped:  # too few to take a third of: every earlier turn goes
            earlier = [m for m in self.history[:ours] if m.role is not Role.SYSTEM]
            if not earlier:
                return False
            self.history = [*(m for m in self.history[:ours] if m.role is Role.SYSTEM),
                            *self.history[ours:]]
            dropped = len(earlier)
        self.after_history_change()
        self.compactions.append(CompactionInfo("context_window", dropped, ""))
        return True

    def after_history_change(self, *, rebuild_wire: bool = True) -> None:
        close_dangling_tool_uses(self.history, INTERRUPTED_OUTPUT)
        self.checked = None
        self.calls_forget()
        self.tokens = history_ops.estimate_tokens(self.history)
        if rebuild_wire:
            self.rebuild_wire()


def _highest_call_number(messages: list[Message]) -> int:
    """The highest N of the ``call_N`` ids the runtime gave calls in ``messages`` (0: none)."""
    highest = 0
    for message in messages:
        for use in message.tool_uses:
            match = _CALL_ID.match(use.id)
            if match:
                highest = max(highest, int(match.group(1)))
    return highest


def _trim(messages: list[Message], cap: int) -> list[Message]:
    """At most ``cap`` messages besides the leading system ones (0: no cap); a tool result is
    never left at the head without its call."""
    return history_ops.trim_history(messages, cap) if cap > 0 else messages
