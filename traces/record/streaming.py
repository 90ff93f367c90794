"""The text a trace's model requests stream, which goes two ways.

* Live: text deltas are never stored. They are coalesced into frames of about 50 ms (the first
  one goes out at once) and announced (``send``, the recorder's) with where their text starts
  in the step's, so a page that loaded part of it (after a reload) joins without a gap.
* Kept: a streaming request's text so far is saved with its step every ``PARTIAL_SAVE_S``
  (``services.step_partial_save``), so that a request cut off by a worker that died keeps what
  it had streamed; it goes once the request's answer is recorded.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import services
from .step_values import payload_text

logger = logging.getLogger(__name__)

# About 50 ms; a little over, so that a turn streams at most 20 frames a second even counting
# the first frame (sent at once) and the last (sent when the model request ends).
DELTA_FRAME_S = 0.055
# A streaming answer's text so far is saved this often (and when it ends unfinished), so a
# request cut off by a worker that died keeps what it had streamed.
PARTIAL_SAVE_S = 2.0
# The first save comes sooner: a page opened (or reloaded) early in an answer finds its start.
PARTIAL_FIRST_SAVE_S = 0.5

SendFrame = Callable[..., Awaitable[None]]  # send(step=, index=, text=, offset=)


class StreamedText:
    """The streamed text of one attempt at one trace. ``db(fn, **kwargs)`` runs ``fn`` on the
    turn's database thread; ``lost()`` says the attempt has lost the trace (nothing more is
    sent or saved, but for ``save_all`` after the runner detached)."""

    def __init__(self, *, trace_id: int, db: Callable[..., Awaitable[Any]], send: SendFrame,
                 lost: Callable[[], bool]) -> None:
        self.trace_id = trace_id
        self.db = db
        self.send = send
        self.lost = lost
        # The frame being gathered: its step, its number, the characters of the step's text
        # sent before it, its parts.
        self.step: int | None = None
        self.index = 0
        self.chars = 0
        self.parts: list[str] = []
        self.last_sent = -math.inf
        self.timer: asyncio.TimerHandle | None = None
        self.lock = asyncio.Lock()
        self.pending: set[asyncio.Task[None]] = set()
        self.partial: dict[int, list[str]] = {}  # streaming request's seq -> its text so far
        self.partial_saved: dict[int, float] = {}  # seq -> when its text was last saved
        self.partial_started: dict[int, float] = {}  # seq -> when its first text came

    def open(self, seq: int) -> None:
        """Model request ``seq`` started: its text is kept from now on."""
        self.partial[seq] = []

    async def add(self, seq: int, text: str) -> None:
        """Text that request ``seq`` streamed: into the current frame (sent when due) and its
        text so far (saved when due)."""
        if self.step != seq:
            await self.flush()
            self.step, self.index, self.chars, self.last_sent = seq, 0, 0, -math.inf
        self.parts.append(text)
        await self._partial_add(seq, text)
        wait = DELTA_FRAME_S - (time.monotonic() - self.last_sent)
        if wait <= 0:
            await self._send_frame()
        elif self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(wait, self._frame_due)

    def restart(self, seq: int) -> None:
        """Request ``seq``'s answer starts over (after ``flush``): what it had streamed is void,
        and its new text starts at offset 0."""
        if seq in self.partial:
            self.partial[seq] = []
        if self.step == seq:
            self.chars = 0

    async def flush(self) -> None:
        """Send what the frame holds (before the step it belongs to is finished)."""
        await self._send_frame()
        if self.pending:
            await asyncio.gather(*list(self.pending), return_exceptions=True)

    def _frame_due(self) -> None:
        self.timer = None
        task = asyncio.ensure_future(self._send_frame())
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _send_frame(self) -> None:
        async with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if not self.parts or self.step is None or self.lost():
                self.parts.clear()
                return
            text = "".join(self.parts)
            self.parts.clear()
            index, offset = self.index, self.chars
            self.index += 1
            self.chars += len(text)
            self.last_sent = time.monotonic()
            step = self.step
        await self.send(step=step, index=index, text=text, offset=offset)

    # -- what a request has streamed so far -------------------------------------------------------
    async def _partial_add(self, seq: int, text: str) -> None:
        parts = self.partial.get(seq)
        if parts is None:
            return
        parts.append(text)
        now = time.monotonic()
        first = self.partial_started.setdefault(seq, now)
        last = self.partial_saved.get(seq)
        due = (now - first >= PARTIAL_FIRST_SAVE_S) if last is None else (now - last >= PARTIAL_SAVE_S)
        if due:
            self.partial_saved[seq] = now
            await self._partial_save(seq)

    async def _partial_save(self, seq: int, *, detached: bool = False) -> None:
        if self.lost() and not detached:
            return
        text, _ = payload_text("".join(self.partial.get(seq) or []))
        try:
            await self.db(services.step_partial_save, trace_id=self.trace_id, seq=seq, text=text)
        except Exception:  # noqa: BLE001 - a lost partial costs an estimate, never the turn
            logger.warning("could not save the streamed text of step %s", seq, exc_info=True)

    async def done(self, seq: int, *, keep: bool) -> None:
        """Request ``seq`` ended: its answer (or error) is recorded, so the saved text goes,
        unless the request failed after streaming some (then it is kept with the step)."""
        parts = self.partial.pop(seq, None)
        self.partial_started.pop(seq, None)
        saved = self.partial_saved.pop(seq, None) is not None
        if keep and parts:
            self.partial[seq] = parts
            await self._partial_save(seq)
            self.partial.pop(seq, None)
        elif saved and not self.lost():
            await self.db(services.step_partial_save, trace_id=self.trace_id, seq=seq, text="")

    async def save_all(self) -> None:
        """Save the text of every request still streaming, after the runner detached the
        recorder: the next attempt records what these requests had streamed."""
        for seq in list(self.partial):
            await self._partial_save(seq, detached=True)
