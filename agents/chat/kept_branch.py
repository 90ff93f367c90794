"""A conversation's branch kept rendered, for the chat's page.

Most of the page's work is the branch on screen: its messages and tool calls read, its turns
laid out and rendered. A branch whose turns have all ended is kept (its HTML, and the meter's
estimate of its history) in each process's cache, under a digest of everything it shows that the
conversation's turns alone say: each turn's state (``event_seq`` moves with every step, its
status, error, cost, tokens and duration), the versions beside it and the reader's rating of it;
the conversation's ``updated_at`` (a turn started or ended, a message sent) and archive state;
and the reader's own (``shown_with``: their session's CSRF token, which its forms carry, and
whether they may act). The messages of an ended turn do not change (an edit or a regeneration
is a new turn), so a page that finds its branch kept reads neither its messages nor its tool
calls and renders none of its turns; any change makes a new key, and nothing is invalidated by
hand. Not kept: a branch with a running turn (its cards and text move), an empty one, anything
under ``DEBUG`` (``agentsite.fragments``). Unread for ``KEPT_S``, a kept branch is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.cache import cache

from agents.models import Conversation
from agents.turns.branches import TurnTree
from agentsite.fragments import kept_key
from traces.models import Trace

from .meter import BranchEstimate

KEPT_S = 3600
PREFIX = "chat-branch:"


@dataclass(frozen=True)
class KeptBranch:
    html: str
    estimate: BranchEstimate


def branch_key(conversation: Conversation, path: list[int], by_id: dict[int, Trace], tree: TurnTree,
               shown_with: tuple[Any, ...]) -> str | None:
    """The key the branch ``path`` (turn ids, oldest first) is kept under, or None when it is
    not to be kept."""
    if not path or not shown_with or any(by_id[pk].status in Trace.ACTIVE for pk in path):
        return None
    turns = [(t.uuid, t.status, t.event_seq, t.error, t.cost_usd, t.total_tokens, t.duration_ms,
              t.estimated_calls, getattr(t, "my_rating", None), getattr(t, "my_comment", None),
              (tree.message_versions(pk), tree.answer_versions(pk)) if pk in tree else None)
             for pk in path for t in (by_id[pk],)]
    return kept_key(conversation.uuid, conversation.updated_at, conversation.archived, shown_with, turns)


def branch_kept(key: str | None) -> KeptBranch | None:
    found = cache.get(PREFIX + key) if key else None
    return found if isinstance(found, KeptBranch) else None


def branch_keep(key: str, html: str, estimate: BranchEstimate) -> None:
    cache.set(PREFIX + key, KeptBranch(str(html), estimate), KEPT_S)
