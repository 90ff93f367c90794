"""Storing, recalling and forgetting memories, and the memory part of a turn's start.

Every function takes a ``MemoryOwner``: the team, agent, user and conversation whose memory is
meant. It comes from the turn (or the page), never from a model's arguments, and every query
is limited to it, so nothing here can reach another team's, agent's or user's memory.

What a turn sees (``entries_for``): the agent's own entries (agent scope), what the agent
remembers about the turn's user (user scope), and the conversation's notes (conversation scope).
A turn for an end user of the person's API key (``MemoryOwner.end_user``, from the
conversation) sees and stores that end user's user memory only; a turn without one, the
person's own (the entries without an end user). One end user never reaches another's memory,
nor the person's own.

Recall ranks by full-text relevance (``memory/search.py``: FTS5 bm25 on SQLite, ts_rank on
PostgreSQL) and scores each entry by the share of the query's words it contains, so that
``min_relevance`` means the same on both databases. An empty query lists the newest entries
without a score. Unlike ZeroClaw there is no LIKE fallback scored 1.0 when nothing matches:
it would let unrelated entries pass any relevance threshold.

At a turn's start (``memory_turn_start``, called by ``agents.builder.turn_setup_build`` in
the worker) memory is recalled for the user's message into the ``[Memory context]`` block
(runtime spec §11, ``agents.runtime.memory_context``), and then, when the agent auto-saves,
the message itself is stored (recall first, so a message never recalls itself). Doing this in
the worker keeps sending a message fast, and a redelivered turn stores the same key again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from agents.runtime.memory_context import (
    MEMORY_CONTEXT_MAX_ENTRIES,
    MemoryItem,
    build_memory_context,
    conversation_memory_key,
    is_autosave_noise,
)
from agentsite.db.prepared import Prepared

from .models import MemoryEntry
from .search import backend_for, coverage, search_terms

Scope = MemoryEntry.Scope
Category = MemoryEntry.Category

MAX_KEY_CHARS = 200
MAX_CONTENT_CHARS = 10_000
MAX_RECALL_LIMIT = 50
AUTOSAVE_MIN_CHARS = 20
CANDIDATES_PER_RESULT = 4
ALL_SCOPES = (Scope.AGENT, Scope.USER, Scope.CONVERSATION)
# What a model may forget: what it stored. Agent-wide memory is managed in the admin.
FORGETTABLE_SCOPES = (Scope.USER, Scope.CONVERSATION)


@dataclass(frozen=True, slots=True)
class MemoryOwner:
    team_id: int
    agent_id: int
    user_id: int | None = None
    conversation_id: int | None = None
    # The end user of the person's API key whose memory is meant; "": the person's own.
    end_user: str = ""


@dataclass(frozen=True, slots=True)
class Recalled:
    entry: MemoryEntry
    score: float | None

    def item(self) -> MemoryItem:
        return MemoryItem(key=self.entry.key, content=self.entry.content, score=self.score,
                          category=self.entry.category, timestamp=self.entry.updated_at)


def _visible_scopes(owner: MemoryOwner, scopes: tuple[str, ...]) -> list[str]:
    """Of ``scopes``, those ``owner`` has entries in: user memory needs a user, conversation
    memory a conversation."""
    return [scope for scope in scopes if scope == Scope.AGENT
            or (scope == Scope.USER and owner.user_id is not None)
            or (scope == Scope.CONVERSATION and owner.conversation_id is not None)]


def entries_for(owner: MemoryOwner, scopes: tuple[str, ...] = ALL_SCOPES) -> QuerySet[MemoryEntry]:
    """The entries ``owner`` may see, in ``scopes``."""
    condition = Q()
    visible = _visible_scopes(owner, scopes)
    if Scope.AGENT in visible:
        condition |= Q(scope=Scope.AGENT)
    if Scope.USER in visible:
        condition |= Q(scope=Scope.USER, user_id=owner.user_id, end_user=owner.end_user)
    if Scope.CONVERSATION in visible:
        condition |= Q(scope=Scope.CONVERSATION, conversation_id=owner.conversation_id)
    if not condition:
        return MemoryEntry.objects.none()
    return MemoryEntry.objects.filter(condition, team_id=owner.team_id, agent_id=owner.agent_id)


def _entry_ids(team_id: int, agent_id: int, user_id: int, conversation_id: int, end_user: str, *,
               scopes: tuple[str, ...], user: bool, conversation: bool) -> QuerySet[MemoryEntry]:
    owner = MemoryOwner(team_id, agent_id, user_id if user else None, conversation_id if conversation else None,
                        end_user)
    return entries_for(owner, scopes).values("id")


# The ids a recall searches among, at every turn's start: compiled once per process.
_entry_ids_read = Prepared(_entry_ids)


def _entry_ids_sql(owner: MemoryOwner, scopes: tuple[str, ...]) -> tuple[str, tuple[Any, ...]] | None:
    """``entries_for(owner, scopes)``'s ids as SQL and parameters; None when it is empty."""
    if not _visible_scopes(owner, scopes):
        return None
    user, conversation = owner.user_id is not None, owner.conversation_id is not None
    return _entry_ids_read.sql(owner.team_id, owner.agent_id, owner.user_id or 0, owner.conversation_id or 0,
                               owner.end_user, scopes=tuple(scopes), user=user, conversation=conversation)


def _owner_lookup(owner: MemoryOwner, scope: str, key: str) -> dict[str, Any]:
    if scope == Scope.AGENT:
        return {"team_id": owner.team_id, "scope": scope, "agent_id": owner.agent_id, "key": key}
    if scope == Scope.USER:
        if owner.user_id is None:
            raise ValidationError("User memory needs a user, and this turn has none.")
        return {"team_id": owner.team_id, "scope": scope, "agent_id": owner.agent_id,
                "user_id": owner.user_id, "end_user": owner.end_user, "key": key}
    if scope == Scope.CONVERSATION:
        if owner.conversation_id is None:
            raise ValidationError("Conversation memory needs a conversation, and there is none "
                                  "here. Store it as user memory instead.")
        return {"team_id": owner.team_id, "scope": scope, "conversation_id": owner.conversation_id,
                "key": key}
    raise ValidationError(f"Unknown memory scope '{scope}'. Use one of: "
                          f"{', '.join(Scope.values)}.")


def memory_store(*, owner: MemoryOwner, key: str, content: str, scope: str = Scope.USER,
                 category: str = Category.CORE, source_trace_id: int | None = None) -> MemoryEntry:
    """Store ``content`` under ``key`` in ``scope``; an entry with that key in the same scope
    and owner is replaced."""
    key = " ".join((key or "").split())
    content = (content or "").strip()
    if not key:
        raise ValidationError("A memory needs a key.")
    if len(key) > MAX_KEY_CHARS:
        raise ValidationError(f"The key is {len(key)} characters long; the limit is {MAX_KEY_CHARS}.")
    if not content:
        raise ValidationError("There is nothing to remember: the content is empty.")
    if len(content) > MAX_CONTENT_CHARS:
        raise ValidationError(f"The content is {len(content):,} characters long; the limit is "
                              f"{MAX_CONTENT_CHARS:,}. Store a shorter summary.")
    if category not in Category.values:
        category = Category.CUSTOM
    lookup = _owner_lookup(owner, scope, key)
    defaults = {"content": content, "category": category, "source_trace_id": source_trace_id,
                "agent_id": owner.agent_id}
    if scope == Scope.CONVERSATION:
        defaults["user_id"] = owner.user_id
        defaults["end_user"] = owner.end_user
    for attempt in (1, 2):
        try:
            with transaction.atomic():
                entry, _ = MemoryEntry.objects.update_or_create(defaults=defaults, **lookup)
            return entry
        except IntegrityError:
            if attempt == 2:  # not a lost race: a real constraint problem
                raise
    raise AssertionError("unreachable")


def memory_recall(*, owner: MemoryOwner, query: str, limit: int = 5, min_relevance: float = 0.0,
                  scopes: tuple[str, ...] = ALL_SCOPES) -> list[Recalled]:
    """The entries of ``owner`` most relevant to ``query``, best first, at most ``limit``,
    those scoring below ``min_relevance`` dropped. An empty query lists the newest entries
    (score None); a query of stop words only finds nothing."""
    limit = max(1, min(int(limit), MAX_RECALL_LIMIT))
    if not (query or "").strip():
        return [Recalled(e, None) for e in entries_for(owner, scopes).order_by("-updated_at", "-id")[:limit]]
    terms = search_terms(query)
    if not terms:
        return []
    ids = _entry_ids_sql(owner, scopes)
    if ids is None:
        return []
    # Every turn recalls, and most find nothing: the entries are built as a queryset only
    # for a backend that filters one, and for what was found.
    backend = backend_for()
    searched = entries_for(owner, scopes) if backend.filters_queryset else None
    ranked = backend.search(searched, terms, limit * CANDIDATES_PER_RESULT, ids=ids)
    if not ranked:
        return []
    rank = dict(ranked)
    found = []
    for entry in entries_for(owner, scopes).filter(id__in=list(rank)):
        score = coverage(terms, f"{entry.key} {entry.content}")
        if score >= min_relevance:
            found.append(Recalled(entry, round(score, 4)))
    found.sort(key=lambda r: (-(r.score or 0.0), -rank[r.entry.pk], -r.entry.updated_at.timestamp(),
                              r.entry.pk))
    return found[:limit]


def memory_forget(*, owner: MemoryOwner, key: str,
                  scopes: tuple[str, ...] = FORGETTABLE_SCOPES) -> int:
    """Delete ``owner``'s entries stored under ``key`` in ``scopes``; how many were deleted."""
    key = " ".join((key or "").split())
    if not key:
        return 0
    deleted, _ = entries_for(owner, scopes).filter(key=key).delete()
    return deleted


def memory_autosave(*, owner: MemoryOwner, text: str, sender: str, message_id: str,
                    source_trace_id: int | None = None) -> MemoryEntry | None:
    """Store a user's message as user memory (category conversation) when it is at least
    ``AUTOSAVE_MIN_CHARS`` long and not noise (runtime spec §11); None when it is not kept."""
    text = (text or "").strip()
    if owner.user_id is None or len(text) < AUTOSAVE_MIN_CHARS or is_autosave_noise(text):
        return None
    text = text[:MAX_CONTENT_CHARS]
    key = conversation_memory_key("chat", sender, message_id)
    return memory_store(owner=owner, key=key[:MAX_KEY_CHARS], content=text, scope=Scope.USER,
                        category=Category.CONVERSATION, source_trace_id=source_trace_id)


def memory_context(*, owner: MemoryOwner, text: str, limit: int, min_relevance: float) -> str:
    """The ``[Memory context]`` block for a message: recalled entries, filtered and capped by
    the rules of runtime spec §11 (at most ``limit`` and never more than 4 entries)."""
    if limit <= 0 or not search_terms(text):
        return ""
    recalled = memory_recall(owner=owner, query=text, limit=limit, min_relevance=min_relevance)
    if not recalled:
        return ""
    return build_memory_context([r.item() for r in recalled], min_relevance=min_relevance,
                                max_entries=min(limit, MEMORY_CONTEXT_MAX_ENTRIES))


def memory_turn_start(*, owner: MemoryOwner, text: str, recall_limit: int, min_relevance: float,
                      auto_save: bool, sender: str, message_id: str,
                      trace_id: int | None) -> str:
    """Recall for the turn's message (the block for ``TurnConfig.memory_context``), then
    auto-save the message when the agent does that."""
    block = memory_context(owner=owner, text=text, limit=recall_limit, min_relevance=min_relevance)
    if auto_save:
        memory_autosave(owner=owner, text=text, sender=sender, message_id=message_id,
                        source_trace_id=trace_id)
    return block
