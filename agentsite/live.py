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

import hashlib
import logging
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

RECHECK_INTERVAL_S = 1.0
RECHECK_EVENT = "access.recheck"
# A person's lists (their conversations, their running and recent turns) changed: their open
# pages read them again (the sidebar, the home page). No data: each page reads its own list,
# with the access it has.
LISTS_EVENT = "lists.changed"


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


async def announce_lists(user_id: int | None) -> None:
    """Tell every open socket of this person that their lists changed (a turn of theirs started
    or ended, a conversation was made or renamed). Never raises: a page that missed it reads its
    lists again when its socket opens."""
    layer = get_channel_layer()
    if layer is None or user_id is None:
        return
    try:
        await layer.group_send(user_group(user_id), {"type": LISTS_EVENT})
    except Exception:  # noqa: BLE001 - the notice is best effort
        log.warning("Could not tell the pages of user %s that their lists changed", user_id,
                    exc_info=True)


def announce_lists_on_commit(user_id: int | None) -> None:
    """``announce_lists`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: async_to_sync(announce_lists)(user_id))


def recheck_sockets_on_commit(user_ids: Iterable[int]) -> None:
    """``recheck_sockets`` once the current transaction commits (at once outside one)."""
    ids = list(user_ids)
    transaction.on_commit(lambda: recheck_sockets(ids))
