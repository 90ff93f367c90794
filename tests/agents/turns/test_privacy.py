"""Who may act on a turn: the conversation's owner or a team admin sends, edits, regenerates,
stops and decides on tool calls; a teammate who can read a shared conversation cannot (403), one
who cannot read it does not find its turns (404)."""

from __future__ import annotations

import pytest
import redis
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from agents.chat.services import conversation_create
from agents.models import Conversation, Message
from agents.turns.approvals import approval_decide
from agents.turns.lifecycle import trace_claim
from agents.turns.services import (
    conversation_stop,
    turn_cancel,
    turn_edit,
    turn_regenerate,
    turn_start,
)
from agents.turns.signals import cancel_key
from tests.members import member_of
from traces.models import Step, Trace


@pytest.fixture
def admin(team_a, make_member):
    return make_member(team_a, "adam", "admin")


def share(conversation) -> None:
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    conversation.refresh_from_db()


def waiting_for_approval(trace) -> None:
    """``trace`` running, with a tool call that waits for a decision (call_1)."""
    trace_claim(trace_id=trace.pk, worker="w1")
    Step.objects.create(trace=trace, seq=1, kind="approval", status="waiting", call_id="call_1",
                        started_at=trace.created_at)


def test_a_teammate_cannot_act_in_a_shared_conversation(conversation, alice, bob, sent_turns):
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    share(conversation)
    for act, action in [
        (lambda: turn_start(conversation=conversation, membership=member_of(bob, conversation), text="hi"), "send messages in it"),
        (lambda: turn_regenerate(conversation=conversation, trace=first, membership=member_of(bob, conversation)), "regenerate its answers"),
        (lambda: turn_edit(conversation=conversation, message=first.user_message, membership=member_of(bob, conversation), text="x"),
         "edit its messages"),
        (lambda: turn_cancel(trace=first, membership=member_of(bob, first)), "stop its turns"),
        (lambda: conversation_stop(conversation=conversation, membership=member_of(bob, conversation)), "stop its turns"),
        (lambda: approval_decide(trace=first, call_id="call_1", approved=True, membership=member_of(bob, first)),
         "approve or deny its tool calls"),
    ]:
        with pytest.raises(PermissionDenied, match=f"^Only the conversation's owner or a team admin can {action}.$"):
            act()
    assert Trace.objects.get().status == "queued" and Message.objects.count() == 1


def test_editing_says_why_an_answer_cannot_be_edited(conversation, alice, sent_turns):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    answer = Message.objects.create(conversation=conversation, role="assistant", text="hi", trace=trace,
                                    blocks=[{"type": "text", "text": "hi"}])
    with pytest.raises(ValidationError, match="not its answers"):
        turn_edit(conversation=conversation, message=answer, membership=member_of(alice, conversation), text="x")


@pytest.mark.django_db(transaction=True)
def test_an_admin_stops_a_members_turn_and_decides_on_its_tool_calls(agent, bob, admin, sent_turns, use_redis):
    bobs = conversation_create(agent=agent, membership=member_of(bob, agent.team))
    trace = turn_start(conversation=bobs, membership=member_of(bob, bobs), text="one")
    waiting_for_approval(trace)

    approval_decide(trace=trace, call_id="call_1", approved=False, membership=member_of(admin, trace))
    stored = redis.Redis.from_url(use_redis).get(f"agentsite:approval:{trace.uuid.hex}:call_1")
    assert stored == b'{"approved": false, "decided_by": "adam", "role": "a team admin"}'

    trace = turn_cancel(trace=trace, membership=member_of(admin, trace))
    assert trace.cancel_reason == "Cancelled by adam"
    assert redis.Redis.from_url(use_redis).get(cancel_key(trace.uuid)) == b"Cancelled by adam"


@pytest.mark.django_db(transaction=True)
def test_the_turn_endpoints_are_404_on_a_private_conversation_and_403_on_a_shared_one(
        client_for, conversation, alice, bob, vera, sent_turns, use_redis):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="one")
    waiting_for_approval(trace)
    cancel = reverse("trace_cancel", args=[trace.uuid])
    decide = reverse("approval_decision", args=[trace.uuid, "call_1"])
    c = client_for(bob)
    assert c.post(cancel).status_code == 404
    assert c.post(decide, {"approved": "1"}).status_code == 404
    share(conversation)
    stop = c.post(cancel, HTTP_HX_REQUEST="true")
    assert stop.status_code == 403 and b"owner or a team admin can stop its turns" in stop.content
    decision = c.post(decide, {"approved": "1"}, HTTP_HX_REQUEST="true")
    assert decision.status_code == 403 and b"owner or a team admin can approve or deny" in decision.content
    assert client_for(vera).post(cancel).status_code == 403  # a viewer, by role
    trace.refresh_from_db()
    assert trace.status == "running" and trace.cancel_requested_at is None
    assert redis.Redis.from_url(use_redis).get(f"agentsite:approval:{trace.uuid.hex}:call_1") is None


def test_an_admin_stops_a_members_turn_from_the_page(client_for, agent, bob, admin, sent_turns):
    bobs = conversation_create(agent=agent, membership=member_of(bob, agent.team))
    trace = turn_start(conversation=bobs, membership=member_of(bob, bobs), text="one")
    assert client_for(admin).post(reverse("trace_cancel", args=[trace.uuid]),
                                  HTTP_HX_REQUEST="true").status_code == 204
    trace.refresh_from_db()
    assert trace.status == "cancelled" and trace.cancel_reason == "Cancelled by adam"
