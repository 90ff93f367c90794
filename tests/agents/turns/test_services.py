"""Starting, queueing, stopping and approving turns: who may, what is stored, what is sent."""

from __future__ import annotations

import pytest
import redis
from django.core.exceptions import PermissionDenied, ValidationError

from agents.chat.services import conversation_create
from agents.models import Conversation, Message
from agents.turns.approvals import approval_decide
from agents.turns.services import MAX_MESSAGE_CHARS, turn_cancel, turn_start
from agents.turns.signals import cancel_key
from tests.members import member_of
from traces.models import Step, Trace


def test_turn_start_stores_the_message_and_a_queued_trace_and_sends_the_task_on_commit(
        conversation, alice, sent_turns, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="  What is 2 + 2?  \n")
        assert sent_turns == []  # nothing leaves before the commit
    assert callbacks and sent_turns == [trace.pk]

    message = Message.objects.get(conversation=conversation)
    assert (message.role, message.text, message.author, message.trace_id) == ("user", "What is 2 + 2?", alice, trace.pk)
    assert message.blocks == [{"type": "text", "text": "What is 2 + 2?"}]
    trace.refresh_from_db()
    assert (trace.status, trace.user_message_id, trace.user, trace.team) == ("queued", message.pk, alice, conversation.team)
    assert trace.agent == conversation.agent and trace.agent_version == conversation.agent.version
    assert trace.enqueued_at is not None


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_turn_start_refuses_an_empty_message(conversation, alice, sent_turns, text):
    with pytest.raises(ValidationError, match="Write a message"):
        turn_start(conversation=conversation, membership=member_of(alice, conversation), text=text)
    assert not Trace.objects.exists() and not Message.objects.exists()


def test_turn_start_refuses_a_message_over_the_limit_and_takes_one_at_it(conversation, alice, sent_turns):
    provider = conversation.agent.provider
    provider.context_window = 65_536  # the demo model's own 8,192 would not hold it
    provider.save()
    with pytest.raises(ValidationError, match="32,001 characters long; the limit is 32,000"):
        turn_start(conversation=conversation, membership=member_of(alice, conversation), text="x" * (MAX_MESSAGE_CHARS + 1))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="x" * MAX_MESSAGE_CHARS)
    assert len(trace.user_message.text) == MAX_MESSAGE_CHARS


def test_a_message_that_cannot_fit_the_models_window_is_refused_before_anything_is_stored(
        conversation, alice, sent_turns):
    provider = conversation.agent.provider
    provider.context_window = 4_096
    provider.save()
    long = "The quick brown fox jumps over the lazy dog. " * 450  # about 5k tokens
    with pytest.raises(ValidationError) as caught:
        turn_start(conversation=conversation, membership=member_of(alice, conversation), text=long)
    message = " ".join(caught.value.messages)
    assert "reads at most 4,096 tokens" in message and "Shorten it" in message
    assert not Trace.objects.exists() and sent_turns == []
    # what the sentence says fits, fits
    fits = int(message.split("can be about ")[1].split(" tokens")[0].replace(",", ""))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="x" * int(fits * 4 * 0.95))
    assert trace.status == Trace.Status.QUEUED


def test_a_viewer_cannot_chat_and_nor_can_another_team(conversation, vera, charlie, sent_turns):
    for user in (vera, charlie):
        with pytest.raises(PermissionDenied):
            turn_start(conversation=conversation, membership=member_of(user, conversation), text="hello")
    assert not Trace.objects.exists() and sent_turns == []


def test_a_member_chats_in_their_own_conversation_not_in_a_teammates(conversation, agent, bob, sent_turns):
    own = conversation_create(agent=agent, membership=member_of(bob, agent.team))
    trace = turn_start(conversation=own, membership=member_of(bob, own), text="hello")
    assert trace.user == bob
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    conversation.refresh_from_db()
    with pytest.raises(PermissionDenied, match="Only the conversation's owner or a team admin can send"):
        turn_start(conversation=conversation, membership=member_of(bob, conversation), text="hello")  # alice's, shared or not
    assert list(Trace.objects.values_list("conversation_id", flat=True)) == [own.pk]


def test_an_archived_conversation_takes_no_messages(conversation, alice, sent_turns):
    Conversation.objects.filter(pk=conversation.pk).update(archived=True)
    conversation.refresh_from_db()
    with pytest.raises(ValidationError, match="archived"):
        turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")


def test_conversation_create_checks_the_team(agent, alice, charlie, team_b, vera):
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team), title="  Plans ")
    assert (conversation.title, conversation.created_by, conversation.agent) == ("Plans", alice, agent)
    with pytest.raises(PermissionDenied):
        conversation_create(agent=agent, membership=member_of(charlie, team_b))  # another team's agent
    with pytest.raises(PermissionDenied):
        conversation_create(agent=agent, membership=member_of(vera, agent.team))


# -- one turn in flight ------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_messages_sent_meanwhile_wait_in_order(conversation, alice, sent_turns):
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="one")
    second = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="two")
    third = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="three")
    assert sent_turns == [first.pk]
    statuses = dict(Trace.objects.values_list("pk", "status"))
    assert statuses == {first.pk: "queued", second.pk: "queued", third.pk: "queued"}
    assert Trace.objects.get(pk=second.pk).enqueued_at is None


@pytest.mark.django_db(transaction=True)
def test_with_interrupt_on_new_message_a_waiting_turn_is_dropped_for_the_new_one(
        make_agent, alice, sent_turns):
    agent = make_agent(name="Eager", interrupt_on_new_message=True)
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="one")
    second = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="two")

    first.refresh_from_db()
    assert (first.status, first.cancel_reason) == ("cancelled", "interrupted by a new message")
    assert first.error == "Interrupted by a new message."
    assert sent_turns == [first.pk, second.pk]


@pytest.mark.django_db(transaction=True)
def test_with_interrupt_on_new_message_the_running_turn_is_signalled(
        make_agent, alice, sent_turns, use_redis):
    from agents.turns.lifecycle import trace_claim

    agent = make_agent(name="Eager", interrupt_on_new_message=True)
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="one")
    assert trace_claim(trace_id=first.pk, worker="w1") is not None

    second = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="two")

    first.refresh_from_db()
    assert first.status == "running" and first.cancel_requested_at is not None
    assert redis.Redis.from_url(use_redis).get(cancel_key(first.uuid)) == b"interrupted by a new message"
    assert sent_turns == [first.pk]  # the new turn goes when the running one has stopped
    assert Trace.objects.get(pk=second.pk).status == "queued"


# -- stopping ---------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_stopping_a_running_turn_sets_the_flag_and_the_signal(agent, bob, sent_turns, use_redis):
    from agents.turns.lifecycle import trace_claim

    conversation = conversation_create(agent=agent, membership=member_of(bob, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(bob, conversation), text="one")
    trace_claim(trace_id=trace.pk, worker="w1")

    trace = turn_cancel(trace=trace, membership=member_of(bob, trace))

    assert trace.status == "running" and trace.cancel_reason == "Cancelled by bob"
    assert redis.Redis.from_url(use_redis).get(cancel_key(trace.uuid)) == b"Cancelled by bob"


@pytest.mark.django_db(transaction=True)
def test_a_viewer_cannot_stop_a_turn_and_stopping_an_ended_turn_does_nothing(
        conversation, alice, vera, sent_turns):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="one")
    with pytest.raises(PermissionDenied):
        turn_cancel(trace=trace, membership=member_of(vera, trace))
    assert Trace.objects.get(pk=trace.pk).status == "queued"

    Trace.objects.filter(pk=trace.pk).update(status="completed")
    trace = turn_cancel(trace=trace, membership=member_of(alice, trace))
    assert trace.status == "completed" and trace.cancel_requested_at is None


# -- approvals --------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_decision_needs_a_call_that_waits_and_a_member(conversation, alice, vera, sent_turns, use_redis):
    from agents.turns.lifecycle import trace_claim

    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="one")
    with pytest.raises(ValidationError, match="not waiting for approval"):
        approval_decide(trace=trace, call_id="call_1", approved=True, membership=member_of(alice, trace))
    trace_claim(trace_id=trace.pk, worker="w1")
    Step.objects.create(trace=trace, seq=1, kind="approval", status="waiting", call_id="call_1",
                        started_at=trace.created_at)
    with pytest.raises(PermissionDenied):
        approval_decide(trace=trace, call_id="call_1", approved=True, membership=member_of(vera, trace))
    with pytest.raises(ValidationError):
        approval_decide(trace=trace, call_id="call_2", approved=True, membership=member_of(alice, trace))

    approval_decide(trace=trace, call_id="call_1", approved=False, membership=member_of(alice, trace))

    stored = redis.Redis.from_url(use_redis).get(f"agentsite:approval:{trace.uuid.hex}:call_1")
    assert stored == b'{"approved": false, "decided_by": "alice", "role": "the conversation\'s owner"}'
