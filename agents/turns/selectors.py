"""Read queries a turn needs: its branch of the conversation, the messages before it, what
waits for approval."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from agents.models import Agent, Conversation, Message
from agents.turns.branches import TurnNode, TurnTree
from agentsite.db.prepared import Prepared
from traces.models import Step, Trace


def conversation_active_traces(*, conversation: Conversation | int) -> QuerySet[Trace]:
    """The conversation's queued and running traces, oldest first."""
    conversation_id = conversation.pk if isinstance(conversation, Conversation) else conversation
    return (Trace.objects.filter(conversation_id=conversation_id, status__in=Trace.ACTIVE)
            .order_by("created_at", "id"))


def _active(conversation_id: int) -> QuerySet[Trace]:
    return conversation_active_traces(conversation=conversation_id)


# Every send reads them (what the new turn waits behind): compiled once per process.
active_traces_read = Prepared(_active)


def _sent_message(conversation_id: int, client_id: str) -> QuerySet[Message]:
    return Message.objects.filter(conversation_id=conversation_id, client_id=client_id).values_list("pk", flat=True)[:1]


def _newest_turn(conversation_id: int) -> QuerySet[Trace]:
    # With its public id, which the message's announcement names (the rest is deferred).
    return Trace.objects.filter(conversation_id=conversation_id).only("id", "uuid").order_by("-id")[:1]


# A send's reads before its writes: whether the browser sent this message before (its
# ``client_id``), and the turn it continues by default.
sent_message_read = Prepared(_sent_message)
newest_turn_read = Prepared(_newest_turn)


def running_turns_time_left(*, worker_prefix: str = "", now: datetime | None = None) -> tuple[int, float]:
    """How many traces run on workers whose name begins with ``worker_prefix``, and the most
    seconds one of them may still run: up to its agent's hard time limit, counted from its
    first start (a trace without an agent: the longest limit of any agent)."""
    now = now or timezone.now()
    running = list(Trace.objects.filter(status=Trace.Status.RUNNING, worker__startswith=worker_prefix)
                   .select_related("agent").only("started_at", "agent__turn_time_limit_s"))
    longest, agentless = 0.0, None
    for trace in running:
        if trace.agent is not None:
            hard = trace.agent.hard_time_limit_s
        else:
            if agentless is None:
                limit = Agent.objects.aggregate(longest=Max("turn_time_limit_s"))["longest"] or 600
                agentless = Agent(turn_time_limit_s=limit).hard_time_limit_s
            hard = agentless
        longest = max(longest, hard - (now - (trace.started_at or now)).total_seconds())
    return len(running), longest


def conversation_history_rows(*, trace: Trace, limit: int, branch: list[int] | None = None) -> list[Message]:
    """The messages before ``trace``'s turn on its branch, oldest first, at most ``limit``.

    The branch is the chain of turns ``trace`` continues (``Message.parent_turn``;
    ``turn_branch_before``, which the caller may pass as ``branch``): for each, its user
    message and then what that turn stored. So a message sent while an earlier turn ran comes
    after that turn's answer, turns queued behind this one are left out, and so are other
    branches (an edited message, a regenerated answer). Messages that belong to no turn come
    first."""
    if branch is None:
        branch = turn_branch_before(trace=trace)
    path = branch[-limit:] if limit > 0 else branch  # every turn holds at least its user message
    rows = path_messages(trace.conversation_id, path, _user_messages(path)) if path else []
    if limit <= 0 or len(rows) < limit:
        loose = _loose_read(trace.conversation_id, trace.user_message_id or 0,
                            at_most=limit - len(rows) if limit > 0 else None)
        rows = [*reversed(loose), *rows]
    return rows[-limit:] if limit > 0 else rows


def _loose_messages(conversation_id: int, user_message_id: int, *, at_most: int | None) -> QuerySet[Message]:
    """The conversation's messages that belong to no turn but ``user_message_id``, newest
    first, ``at_most`` of them."""
    loose = (Message.objects.filter(conversation_id=conversation_id, trace__isnull=True)
             .exclude(pk=user_message_id).order_by("-id"))
    return loose[:at_most] if at_most is not None else loose


_loose_read = Prepared(_loose_messages)


def _user_messages(path: list[int]) -> dict[int, int | None]:
    return dict(Trace.objects.filter(pk__in=path).values_list("id", "user_message_id"))


def turn_branch_before(*, trace: Trace) -> list[int]:
    """The ids of the turns ``trace`` continues, oldest first (its branch, without itself)."""
    tree = turn_tree(_tree_rows(trace.conversation_id))
    return tree.path(tree.parent(trace.pk)) if trace.pk in tree else []


def _tree_rows(conversation_id: int) -> list[TurnNode]:
    return [TurnNode(pk, message, parent) for pk, message, parent in _tree_read(conversation_id)]


_tree_read = Prepared(lambda conversation_id: Trace.objects.filter(conversation_id=conversation_id)
                      .values_list("id", "user_message_id", "user_message__parent_turn_id").order_by("id"))


def turn_tree(nodes: Iterable[TurnNode]) -> TurnTree:
    return TurnTree(nodes)


def path_messages(conversation_id: int, path: list[int], user_message_of: dict[int, int | None] | TurnTree,
                   fields: tuple[str, ...] | None = None) -> list[Message]:
    """The messages of the turns on ``path``, in path order: each turn's user message, then
    what the turn stored (by id)."""
    return branch_messages(conversation_id, path, user_message_of, fields, loose=False)[0]


def branch_messages(conversation_id: int, path: list[int],
                    user_message_of: dict[int, int | None] | TurnTree,
                    fields: tuple[str, ...] | None = None, *, loose: bool = True
                    ) -> tuple[list[Message], list[Message]]:
    """``path_messages``, and (``loose``) in the same query the conversation's messages that
    belong to no turn, oldest first."""
    if not path and not loose:
        return [], []
    if isinstance(user_message_of, TurnTree):
        user_message_of = {t: user_message_of.nodes[t].user_message_id for t in path}
    user_ids = {m for m in user_message_of.values() if m}
    wanted = Q(trace_id__in=path) | Q(pk__in=user_ids)
    if loose:
        wanted |= Q(trace__isnull=True)
    rows = Message.objects.filter(conversation_id=conversation_id).filter(wanted).order_by("id")
    if fields:
        rows = rows.only(*fields)
    by_id: dict[int, Message] = {}
    produced: dict[int, list[Message]] = {}
    of_no_turn: list[Message] = []
    for row in rows:
        if row.trace_id is None and row.pk not in user_ids:
            of_no_turn.append(row)
            continue
        by_id[row.pk] = row
        if row.trace_id is not None:
            produced.setdefault(row.trace_id, []).append(row)
    ordered: list[Message] = []
    for turn in path:
        mine = user_message_of.get(turn)
        if mine in by_id:
            ordered.append(by_id[mine])
        ordered.extend(m for m in produced.get(turn, ()) if m.pk != mine and m.pk not in user_ids)
    return ordered, of_no_turn


def approval_waiting(*, trace: Trace, call_id: str) -> Step | None:
    """The approval step of ``trace`` that waits for a decision on ``call_id``, if any."""
    return (Step.objects.filter(trace=trace, kind=Step.Kind.APPROVAL, call_id=call_id,
                                status=Step.Status.WAITING).order_by("-seq").first())
