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

import logging
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

RECHECK_INTERVAL_S = 1.0
RECHECK_EVENT = "access.recheck"


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


def recheck_sockets_on_commit(user_ids: Iterable[int]) -> None:
    """``recheck_sockets`` once the current transaction commits (at once outside one)."""
    ids = list(user_ids)
    transaction.on_commit(lambda: recheck_sockets(ids))
