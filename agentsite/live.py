"""Open websockets follow access: when a person's access may have changed (a membership removed
or its role changed, an account deactivated, a conversation no longer shared), every socket of
theirs checks again and closes when it may no longer listen.

Every consumer (``agentsite.consumers.AccessCheckedConsumer``) joins its user's group
``user_<id>``; ``recheck_sockets(user_ids)`` sends that group a notice. A notice can be lost (a
Redis restart, a membership deleted by a queryset that sends no signal), so consumers also check
again before forwarding a frame once their last check is older than ``RECHECK_INTERVAL_S``: a
missed notice leaks at most about a second.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from agentsite.loop_thread import LoopThread

log = logging.getLogger(__name__)

RECHECK_INTERVAL_S = 1.0
RECHECK_EVENT = "access.recheck"
# A person's lists (their conversations, their running and recent turns) changed: their open
# pages read them again (the sidebar, the home page). No data: each page reads its own list,
# with the access it has.
LISTS_EVENT = "lists.changed"
# The least time between two lists notices to one page (``AccessCheckedConsumer.lists_changed``).
LISTS_NOTICE_GAP_S = 1.0


def user_group(user_id: int) -> str:
    return f"user_{int(user_id)}"


def recheck_sockets(user_ids: Iterable[int]) -> None:
    """Tell every open socket of these people to check its access again now. Never raises: a
    channel layer that is down is logged, and the consumers' own periodic check still runs."""
    layer = get_channel_layer()
    if layer is None:
        return
    for user_id in dict.fromkeys(int(u) for u in user_ids if u is not None):
        try:
            async_to_sync(layer.group_send)(user_group(user_id), {"type": RECHECK_EVENT})
        except Exception:  # noqa: BLE001 - the notice is best effort; the periodic check remains
            log.warning("Could not ask the sockets of user %s to check their access", user_id,
                        exc_info=True)


# What a listed row shows that can change: read from the loaded row only (``__dict__``), so a
# field the list's query deferred is never fetched for it.
_SHOWN = ("pk", "updated_at", "title", "pinned", "archived", "status", "cost_usd")


def list_version(*lists: Iterable[Any]) -> str:
    """A short fingerprint of what some lists show: the watermark a page renders them with and
    sends back when it reads them again, so that an unchanged list is answered 204 (htmx swaps
    nothing) instead of being rendered again. Values that are not rows (a sum) count as they
    are."""
    digest = hashlib.blake2b(digest_size=8)
    for rows in lists:
        for row in rows:
            shown = (tuple(row.__dict__.get(name) if name != "pk" else row.pk for name in _SHOWN)
                     if hasattr(row, "__dict__") and hasattr(row, "pk") else row)
            digest.update(repr(shown).encode())
        digest.update(b"|")
    return digest.hexdigest()


# From each process, a person's lists notice goes out at most once per
# ``LISTS_FOLD_S``: every start and end of their turns announces one, and a burst of their
# turns (200 at once through the API) would otherwise send each of their open pages hundreds
# through the channel layer. One due within that time waits for its end, and the others due
# meanwhile are folded into it, so the last change is always announced.
LISTS_FOLD_S = 0.5


class _FoldedNotices:
    """The process's waiting lists notices, sent from a thread of their own whose event loop
    (and so the channel layer's connections) lasts as long as the process: a turn's loop ends
    with the turn."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent_at: dict[int, float] = {}
        self._waiting: set[int] = set()
        self._thread = LoopThread("lists-notices")
        self._sending: set[asyncio.Task] = set()

    def due_in(self, user_id: int, fold: float) -> float | None:
        """0 to send now, the seconds to wait before sending, or None when a notice for this
        person already waits (this one is folded into it)."""
        now = time.monotonic()
        with self._lock:
            if user_id in self._waiting:
                return None
            wait = self._sent_at.get(user_id, now - fold) + fold - now
            if wait > 0:
                self._waiting.add(user_id)
                return wait
            if len(self._sent_at) > 10_000:  # forget those whose time ended long ago
                self._sent_at = {u: t for u, t in self._sent_at.items() if now - t < fold}
            self._sent_at[user_id] = now
            return 0.0

    def send_later(self, user_id: int, delay: float) -> None:
        loop = self._thread.loop()
        loop.call_soon_threadsafe(loop.call_later, delay, self._send_waiting, user_id)

    def _send_waiting(self, user_id: int) -> None:  # in the notices' loop
        with self._lock:
            self._waiting.discard(user_id)
            self._sent_at[user_id] = time.monotonic()
        task = asyncio.ensure_future(_send_lists(user_id))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)


_folded = _FoldedNotices()


async def _send_lists(user_id: int) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(user_group(user_id), {"type": LISTS_EVENT})
    except Exception:  # noqa: BLE001 - the notice is best effort
        log.warning("Could not tell the pages of user %s that their lists changed", user_id,
                    exc_info=True)


async def announce_lists(user_id: int | None) -> None:
    """Tell every open socket of this person that their lists changed (a turn of theirs started
    or ended, a conversation was made or renamed): now, or folded with others at the end of
    ``LISTS_FOLD_S``. Never raises: a page that missed it reads its lists again when its socket
    opens."""
    if user_id is None or get_channel_layer() is None:
        return
    wait = _folded.due_in(int(user_id), LISTS_FOLD_S)
    if wait is None:
        return
    if wait > 0:
        _folded.send_later(int(user_id), wait)
        return
    await _send_lists(int(user_id))


def announce_lists_on_commit(user_id: int | None) -> None:
    """``announce_lists`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: async_to_sync(announce_lists)(user_id))


def recheck_sockets_on_commit(user_ids: Iterable[int]) -> None:
    """``recheck_sockets`` once the current transaction commits (at once outside one)."""
    ids = list(user_ids)
    transaction.on_commit(lambda: recheck_sockets(ids))
