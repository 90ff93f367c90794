"""Read queries of the chat: the conversation list and one conversation as the chat shows it
(turns, branches, tool cards (``tool_cards``), the meter)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery
from django.http import Http404
from django.utils import timezone
from django.utils.safestring import mark_safe

from agents.access import conversations_visible
from agents.models import Agent, Conversation, Message
from agents.runtime.pricing import TOKEN_FIELDS
from agents.turns.branches import TurnNode, TurnTree, Versions
from agents.turns.selectors import branch_messages, conversation_active_traces
from agents.turns.tool_cards import ToolCard, card_steps, tool_cards
from agentsite.access import sees_all_of_team, viewer_standin
from agentsite.db.prepared import Prepared
from agentsite.fragments import kept_key
from agentsite.models import Membership, Team
from traces.models import Feedback, Step, StepPayload, Trace
from traces.record.live import uuid_hex

from .kept_branch import branch_keep, branch_kept, branch_key
from .meter import BranchEstimate, Meter, branch_estimate, conversation_meter


# -- the chat ------------------------------------------------------------------------------------
def agent_choices(*, team: Team) -> list[Agent]:
    """The team's agents to chat with, by name (the home and chat pages': compiled once per
    process)."""
    return _agent_choices_read(team.pk)


_agent_choices_read = Prepared(
    lambda team_id: Agent.objects.filter(team_id=team_id).select_related("provider")
    .only("uuid", "name", "description", "suggested_prompts", "model", "allowed_models",
          "provider__kind", "provider__name").order_by("name"))


def conversation_list(*, membership: Membership, query: str = "", scope: str = "mine",
                      archived: bool = False, limit: int = 100) -> list[Conversation]:
    """The conversations of the membership's team to list: the person's own (``scope="mine"``)
    or every one of the team they may see (``"team"``: shared ones, and all for admins),
    archived or not, newest first (the person's pinned ones first). ``query`` matches the title
    or the text of any message. A stateless API request's conversation (``ephemeral``) is
    never listed: it is the record of one request, reached from its trace."""
    query = " ".join((query or "").split())[:200]
    if not query:  # every page's sidebar: compiled once per process
        return _listed_read(membership.team_id, membership.user_id, sees_all=sees_all_of_team(membership),
                            team_scope=scope == "team", archived=archived, limit=limit)
    return list(_listed(membership.team_id, membership.user_id, sees_all=sees_all_of_team(membership),
                        team_scope=scope == "team", archived=archived, limit=limit, query=query))


# A conversation as its pages read it: its agent, the agent's provider, its author and team.
PAGE_COLUMNS = ("agent", "agent__provider", "created_by", "team")


def conversation_for_page(membership: Membership, conversation_uuid: uuid.UUID) -> Conversation:
    """A conversation ``membership`` may see (its own, a shared one, or any as an admin), not
    deleted, with ``PAGE_COLUMNS``; 404 otherwise, whether it is another team's or a teammate's
    private one. Every request of a conversation's pages reads it: compiled once per process."""
    try:
        return _page_conversation_read.get(membership.team_id, membership.user_id, conversation_uuid,
                                           sees_all=sees_all_of_team(membership))
    except (Conversation.DoesNotExist, TypeError) as exc:  # TypeError: not a UUID
        raise Http404("Not found.") from exc


def _page_conversation(team_id: int, user_id: int, conversation_uuid: uuid.UUID, *,
                       sees_all: bool) -> QuerySet[Conversation]:
    return (conversations_visible(viewer_standin(team_id, user_id, sees_all=sees_all),
                                  Conversation.objects.select_related(*PAGE_COLUMNS))
            .filter(uuid=conversation_uuid, deleted_at__isnull=True))


_page_conversation_read = Prepared(_page_conversation)


def _listed(team_id: int, user_id: int, *, sees_all: bool, team_scope: bool, archived: bool, limit: int,
            query: str = "") -> QuerySet[Conversation]:
    rows = (conversations_visible(viewer_standin(team_id, user_id, sees_all=sees_all))
            .filter(archived=archived, deleted_at__isnull=True, ephemeral=False).select_related("agent"))
    shown = ["uuid", "title", "updated_at", "archived", "shared", "pinned", "created_by_id", "agent__name"]
    if team_scope:  # who started each: the team's list only (one's own are the reader's)
        rows, shown = rows.select_related("created_by"), [*shown, "created_by__username"]
    else:
        rows = rows.filter(created_by_id=user_id)
    if query:
        in_messages = Message.objects.filter(conversation_id=OuterRef("pk"), text__icontains=query)
        rows = rows.filter(Q(title__icontains=query) | Exists(in_messages))
    order = ("-updated_at", "-id") if team_scope else ("-pinned", "-updated_at", "-id")
    return rows.only(*shown).order_by(*order)[:limit]


_listed_read = Prepared(_listed)


def conversation_groups(conversations: Iterable[Conversation], *, today: Any = None
                        ) -> list[tuple[str, list[Conversation]]]:
    """The sidebar's sections: pinned, then by day (today, yesterday, the last 7 and 30 days,
    older), keeping the list's order inside each."""
    today = today or timezone.localdate()
    groups: dict[str, list[Conversation]] = {}
    for c in conversations:
        if c.pinned:
            label = "Pinned"
        else:
            age = (today - timezone.localdate(c.updated_at)).days
            label = ("Today" if age <= 0 else "Yesterday" if age == 1
                     else "Previous 7 days" if age < 7 else "Previous 30 days" if age < 30
                     else "Older")
        groups.setdefault(label, []).append(c)
    return list(groups.items())


def sidebar_key(groups: list[tuple[str, list[Conversation]]], current: Conversation | None) -> str | None:
    """The key of the sidebar's list as it shows ``groups`` with ``current`` marked, for its
    ``{% cache %}`` (``agentsite.fragments``)."""
    current_pk = current.pk if current is not None else None
    return kept_key([(label, [(c.uuid, str(c), c.agent.name, c.pk == current_pk) for c in items])
                     for label, items in groups])


# -- one conversation, as the chat shows it ------------------------------------------------------
TRACE_FIELDS = (
    "id", "uuid", "status", "conversation_id", "user_message_id", "created_at", "started_at",
    "error", "error_kind", "cancel_reason", "model", "provider_kind", "duration_ms", "cost_usd",
    "event_seq", "estimated_calls", "meta", *TOKEN_FIELDS,
)
MESSAGE_FIELDS = ("id", "uuid", "role", "text", "blocks", "trace_id", "conversation_id",
                  "parent_turn_id", "created_at", "author_id", "outcome")


@dataclass
class TurnView:
    """One turn on the branch shown: the user's message and the answer, in reading order
    (``parts``: ("text", message) and ("card", ToolCard))."""

    trace: Trace
    user_message: Message | None
    parts: list[tuple[str, Any]] = field(default_factory=list)
    message_versions: Versions | None = None
    answer_versions: Versions | None = None
    # The reader's thumbs up or down on the answer (``chat_view``'s ``reader``).
    my_feedback: Feedback | None = None
    # A running turn's model request that is streaming: its step and the text so far
    # (``with_streamed_text``), so a reload or a late reader sees it and live frames continue it.
    streaming: tuple[int, str] | None = None

    @property
    def active(self) -> bool:
        return self.trace.status in Trace.ACTIVE

    @property
    def has_text(self) -> bool:
        return any(kind == "text" for kind, _ in self.parts)

    @property
    def interrupted(self) -> bool:
        """The answer holds text streamed before the turn stopped (marked on that text)."""
        return any(kind == "text" and part.outcome == Message.Outcome.INTERRUPTED
                   for kind, part in self.parts)

    @property
    def render_key(self) -> str | None:
        """What the turn's HTML shows, for the chat's ``{% cache %}`` of a finished turn
        (``agentsite.fragments``): a re-pricing, a rating or a new version beside it renders it
        again; None while it runs (its cards and text still move)."""
        trace, message = self.trace, self.user_message
        return kept_key(
            trace.uuid, trace.status, trace.error, trace.event_seq, trace.estimated_calls,
            trace.total_tokens, trace.cost_usd, trace.duration_ms,
            (message.uuid, message.text, message.blocks) if message is not None else None,
            self.message_versions, self.answer_versions,
            (self.my_feedback.rating, self.my_feedback.comment) if self.my_feedback else None,
            [(kind, (part.uuid, part.text, part.outcome) if kind == "text" else part)
             for kind, part in self.parts],
            running=self.active)


@dataclass
class ChatView:
    """The branch on screen. ``html``: its turns as kept rendered (``kept_branch``; ``loose``
    and ``turns`` are then not read); ``keep_as``: the key to keep its rendered turns under
    (``keep``), when they may be kept and were not."""

    conversation: Conversation
    leaf: Trace | None
    loose: list[Message]
    turns: list[TurnView]
    meter: Meter
    html: str | None = None
    keep_as: str | None = None
    estimate: BranchEstimate | None = None

    @property
    def running(self) -> bool:
        return any(t.active for t in self.turns)

    def keep(self, html: str) -> None:
        """Keep ``html``, the branch's turns as the page rendered them, for the next pages."""
        if self.keep_as is not None and self.estimate is not None:
            branch_keep(self.keep_as, html, self.estimate)


def streamed_text(trace_ids: Iterable[int]) -> dict[int, tuple[int, str]]:
    """For running turns: the streaming request's step and the text it has streamed so far, as
    the worker last saved it (every couple of seconds). One query."""
    ids = list(trace_ids)
    if not ids:
        return {}
    rows = (StepPayload.objects.filter(kind=StepPayload.Kind.PARTIAL, step__trace_id__in=ids,
                                       step__status=Step.Status.RUNNING)
            .values_list("step__trace_id", "step__seq", "content").order_by("step__seq"))
    return {trace_id: (seq, content) for trace_id, seq, content in rows}


def with_streamed_text(turns: list[TurnView]) -> None:
    found = streamed_text(t.trace.pk for t in turns if t.active)
    for turn in turns:
        turn.streaming = found.get(turn.trace.pk)


def _traces(conversation_id: int, reader_id: int | None = None) -> list[Trace]:
    """The conversation's turns, each with what its model counted on its last request
    (``last_request_tokens``, for the meter) and, for ``reader_id``, their own rating of its
    answer (``my_rating``, ``my_comment``): one query, compiled once per process."""
    return _traces_read(conversation_id, reader_id or 0, for_reader=reader_id is not None)


def _traces_query(conversation_id: int, reader_id: int, *, for_reader: bool) -> QuerySet[Trace]:
    last_request = (Step.objects.filter(trace_id=OuterRef("pk"), kind=Step.Kind.LLM_REQUEST, success=True)
                    .order_by("-seq").annotate(tokens=F("input_tokens") + F("output_tokens")
                                               + F("cache_write_tokens") + F("cache_read_tokens"))
                    .values("tokens")[:1])
    rows = (Trace.objects.filter(conversation_id=conversation_id)
            .annotate(parent_turn_id=F("user_message__parent_turn_id"),
                      last_request_tokens=Subquery(last_request)))
    if for_reader:
        mine = Feedback.objects.filter(trace_id=OuterRef("pk"), user_id=reader_id)
        rows = rows.annotate(my_rating=Subquery(mine.values("rating")[:1]),
                             my_comment=Subquery(mine.values("comment")[:1]))
    return rows.only(*TRACE_FIELDS).order_by("id")


_traces_read = Prepared(_traces_query)


def _with_feedback(turns: list[TurnView], reader_id: int | None) -> None:
    """Each turn's ``my_feedback``: the reader's rating of its answer, from ``_traces``."""
    if reader_id is None:
        return
    for turn in turns:
        rating = getattr(turn.trace, "my_rating", None)
        if rating is not None:
            turn.my_feedback = Feedback(trace_id=turn.trace.pk, user_id=reader_id, rating=rating,
                                        comment=turn.trace.my_comment or "")


def chat_view(conversation: Conversation, *, at: Any = None, reader: Any = None,
              shown_with: tuple[Any, ...] = ()) -> ChatView:
    """The conversation's branch through the turn with public id ``at`` (its newest leaf), or
    the newest turn's branch; with its turns, tool cards, versions, meter and ``reader``'s
    ratings. Three queries (the turns, their messages, their tool calls with the start of their
    arguments) and the context window's, however long the conversation is; with
    ``shown_with`` (what the branch's HTML shows of its reader), a branch kept rendered is
    served from the turns' query alone (``kept_branch``)."""
    reader_id = reader.pk if reader is not None else None
    traces = _traces(conversation.pk, reader_id)
    by_id = {t.pk: t for t in traces}
    tree = TurnTree(TurnNode(t.pk, t.user_message_id, t.parent_turn_id) for t in traces)
    start = next((t.pk for t in traces if str(t.uuid.hex) == uuid_hex(at)), None) if at else None
    leaf_id = tree.latest_leaf(start) if start is not None else tree.latest()
    path = tree.path(leaf_id)
    key = branch_key(conversation, path, by_id, tree, shown_with)
    kept_branch = branch_kept(key)
    if kept_branch is not None:
        meter = conversation_meter(conversation, traces=traces, estimate=kept_branch.estimate)
        # Rendered by this page's template from the record, autoescaped, when it was kept.
        return ChatView(conversation, by_id.get(leaf_id), [], [], meter,
                        html=mark_safe(kept_branch.html))  # noqa: S308
    rows, loose = branch_messages(conversation.pk, path, tree, MESSAGE_FIELDS)
    steps, arguments = card_steps(path) if path else ([], {})
    cards = tool_cards(steps, arguments, {pk: by_id[pk].uuid for pk in path})
    turns = _turn_views(path, by_id, tree, rows, cards)
    with_streamed_text(turns)
    _with_feedback(turns, reader_id)
    estimate = branch_estimate(conversation, [*loose, *rows])
    meter = conversation_meter(conversation, traces=traces, estimate=estimate)
    for row in [*loose, *rows]:
        row.conversation = conversation
    return ChatView(conversation, by_id.get(leaf_id), [m for m in loose if m.text], turns, meter,
                    keep_as=key, estimate=estimate)


def turn_view(trace: Trace) -> tuple[TurnView, Meter]:
    """One turn as ``chat_view`` shows it, and the meter for its branch (for a live update)."""
    conversation = trace.conversation
    traces = _traces(conversation.pk)
    by_id = {t.pk: t for t in traces}
    by_id[trace.pk] = trace
    tree = TurnTree(TurnNode(t.pk, t.user_message_id, t.parent_turn_id) for t in traces)
    path = tree.path(trace.pk) if trace.pk in tree else [trace.pk]
    rows, loose = branch_messages(conversation.pk, path if trace.pk in tree else [], tree,
                                  MESSAGE_FIELDS)
    steps, arguments = card_steps([trace.pk])
    cards = tool_cards(steps, arguments, {trace.pk: trace.uuid})
    view = _turn_views([trace.pk], by_id, tree, [m for m in rows if m.trace_id == trace.pk
                                                or m.pk == trace.user_message_id], cards)[0]
    meter = conversation_meter(conversation, traces=traces,
                               estimate=branch_estimate(conversation, [*loose, *rows]))
    return view, meter


def _turn_views(path: list[int], by_id: dict[int, Trace], tree: TurnTree, rows: list[Message],
                cards: dict[tuple[int, str], ToolCard]) -> list[TurnView]:
    messages = {m.pk: m for m in rows}
    produced: dict[int, list[Message]] = {}
    for row in rows:
        if row.trace_id is not None:
            produced.setdefault(row.trace_id, []).append(row)
    views = []
    for turn_id in path:
        trace = by_id[turn_id]
        view = TurnView(trace, messages.get(trace.user_message_id))
        if turn_id in tree:
            versions = tree.message_versions(turn_id)
            view.message_versions = _uuids(versions, by_id)
            view.answer_versions = _uuids(tree.answer_versions(turn_id), by_id)
        for row in produced.get(turn_id, ()):
            if row.role != Message.Role.ASSISTANT:
                continue
            if row.text.strip():
                view.parts.append(("text", row))
            for block in row.blocks or []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    card = cards.pop((turn_id, str(block.get("id", ""))), None)
                    if card is not None:
                        view.parts.append(("card", card))
        rest = sorted((c for (t, _), c in cards.items() if t == turn_id), key=lambda c: c.seq)
        view.parts.extend(("card", c) for c in rest)
        views.append(view)
    return views


def _uuids(versions: Versions, by_id: dict[int, Trace]) -> Versions:
    def uuid_of(pk: int | None) -> Any:
        return by_id[pk].uuid if pk is not None and pk in by_id else None

    return Versions(versions.index, versions.count, uuid_of(versions.previous), uuid_of(versions.next))


def conversation_active_trace(conversation: Conversation) -> Trace | None:
    """The turn the chat shows as in progress (the oldest queued or running one)."""
    return conversation_active_traces(conversation=conversation).only("uuid", "status", "event_seq", "conversation_id").first()
