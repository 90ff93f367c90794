"""Who sees a conversation and who acts in it: the privacy model inside a team.

* A conversation belongs to the person who started it (``created_by``). It is seen by its owner,
  by the team's owners and admins, and by everyone in the team (viewers too) once it is
  ``shared``. For anyone else it does not exist: a 404, as for another team's object.
* Acting in it (send, edit a message, regenerate, stop a turn, approve or deny a tool call,
  rename, archive, delete, share or unshare) is for its owner and the team's owners and admins,
  never for a viewer. Anyone else who can see it gets a 403 with a plain message.

Its traces (``traces.record.selectors``) and conversation memory (``memory.selectors``) follow the
same rule through their conversation; the rule itself is ``agentsite.access.own_or_shared``. Views,
the chat's socket, the chat's lists and the turn services use the functions here.

Sending is checked once, where the conversation is found: ``conversation_acting_or_404`` (or
``conversation_act_check`` on a conversation in hand) gives an ``Acting``, the membership and the
conversation it may act in, and the services that send take that and check nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet

from agents.models import Conversation
from agentsite.access import get_for_team_or_404, may_act_for, own_or_shared, visible_by_uuid
from agentsite.models import Membership

VIEWER_MESSAGE = "You need to be a team member (not a viewer) to chat with agents."


def conversation_visibility(membership: Membership | None, *, prefix: str = "") -> Q:
    """The filter for the conversations ``membership`` may see (``prefix``: the path from
    another model to its conversation, such as ``"conversation__"``)."""
    return own_or_shared(membership, owner=f"{prefix}created_by", shared=f"{prefix}shared")


def conversations_visible(membership: Membership | None,
                          queryset: QuerySet[Conversation] | None = None) -> QuerySet[Conversation]:
    """The conversations of ``membership``'s team that it may see."""
    qs = Conversation.objects.all() if queryset is None else queryset
    if membership is None:
        return qs.none()
    return qs.filter(team_id=membership.team_id).filter(conversation_visibility(membership))


def conversation_get_or_404(membership: Membership, queryset: QuerySet[Conversation] | None = None,
                            **lookup: Any) -> Conversation:
    """One conversation of the membership's team that it may see; any other is a 404."""
    qs = Conversation.objects.all() if queryset is None else queryset
    return get_for_team_or_404(qs.filter(conversation_visibility(membership)), membership.team, **lookup)


def conversation_acting_or_404(membership: Membership, action: str,
                                queryset: QuerySet[Conversation] | None = None, **lookup: Any) -> Acting:
    """One conversation of the membership's team that it may see (any other is a 404) and act
    in (otherwise PermissionDenied naming ``action``), with the membership: the send path's one
    look at the access rules."""
    return conversation_act_check(membership, conversation_get_or_404(membership, queryset, **lookup),
                                  action)


def conversation_visible_to(user: Any, conversation_uuid: Any) -> bool:
    """Whether ``user`` may see (and so follow live) the conversation with this public id."""
    return visible_by_uuid(user, Conversation, conversation_uuid, conversations_visible)


def can_act_in(membership: Membership | None, conversation: Conversation) -> bool:
    """Whether ``membership`` may send, edit, regenerate, stop, approve or manage in it."""
    if membership is None or membership.team_id != conversation.team_id:
        return False
    return may_act_for(membership, conversation.created_by_id)


@dataclass(frozen=True, slots=True)
class Acting:
    """A membership that the rules here found may act in ``conversation``. Made only by
    ``conversation_act_check`` (and ``conversation_acting_or_404``); the services that act
    (``turn_send``, ``chat_command``) take it instead of a loose membership and conversation, so
    they cannot be handed a pair nobody checked, and do not check it again."""

    membership: Membership
    conversation: Conversation


def conversation_act_check(membership: Membership | None, conversation: Conversation,
                           action: str) -> Acting:
    """``membership`` (the person's, as the request, socket or API key resolved it) with
    ``conversation`` when it may act in it; otherwise PermissionDenied with a plain message
    naming ``action`` (such as "stop its turns"). Nothing is looked up."""
    membership = chat_check(membership)
    if not can_act_in(membership, conversation):
        raise PermissionDenied(f"Only the conversation's owner or a team admin can {action}.")
    return Acting(membership, conversation)


def chat_check(membership: Membership | None) -> Membership:
    """``membership`` when it may chat in its team (a member, not a viewer); otherwise
    PermissionDenied."""
    if membership is None or not membership.can_chat:
        raise PermissionDenied(VIEWER_MESSAGE)
    return membership
