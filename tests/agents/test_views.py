"""The chat pages and the turn endpoints (send, stop, approve), by role and team."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Conversation, Message
from traces.models import Trace


def test_chat_lists_conversations_and_starts_one(client_for, alice, agent):
    c = client_for(alice)
    page = c.get(reverse("chat"))
    assert page.status_code == 200 and agent.name.encode() in page.content
    response = c.post(reverse("conversation_new"), {"agent": str(agent.uuid)})
    conversation = Conversation.objects.get(created_by=alice)
    assert response.status_code == 302 and response.url == reverse("conversation", args=[conversation.uuid])
    assert c.get(response.url).status_code == 200


def test_sending_stores_the_message_and_queues_a_turn(client_for, alice, conversation, sent_turns, django_capture_on_commit_callbacks):
    c = client_for(alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = c.post(reverse("message_send", args=[conversation.uuid]), {"text": "what is 2+2?"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    trace = Trace.objects.get()
    assert sent_turns == [trace.pk] and trace.status == "queued"
    body = response.content.decode()
    assert f'id="message-{trace.user_message.uuid.hex}"' in body and f'id="pending-{trace.uuid.hex}"' in body
    assert "what is 2+2?" in body


def test_bad_messages_are_refused_with_a_clear_message(client_for, alice, conversation, sent_turns):
    c = client_for(alice)
    empty = c.post(reverse("message_send", args=[conversation.uuid]), {"text": "   "}, HTTP_HX_REQUEST="true")
    assert empty.status_code == 422 and b"Write a message" in empty.content
    huge = c.post(reverse("message_send", args=[conversation.uuid]), {"text": "x" * 32_001}, HTTP_HX_REQUEST="true")
    assert huge.status_code == 422 and b"the limit is 32,000" in huge.content
    assert not Message.objects.exists() and sent_turns == []


def test_message_text_is_escaped(client_for, alice, conversation, sent_turns):
    c = client_for(alice)
    c.post(reverse("message_send", args=[conversation.uuid]), {"text": "<img src=x onerror=alert(1)>"})
    page = c.get(reverse("conversation", args=[conversation.uuid])).content.decode()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_viewer_reads_but_cannot_send_or_stop(client_for, alice, conversation, team_a, make_member, sent_turns):
    vera = make_member(team_a, "vera", "viewer")
    c = client_for(vera)
    assert c.get(reverse("conversation", args=[conversation.uuid])).status_code == 200
    assert c.post(reverse("message_send", args=[conversation.uuid]), {"text": "hi"}).status_code == 403
    trace = _queued_trace(client_for(alice), conversation)
    assert c.post(reverse("trace_cancel", args=[trace.uuid])).status_code == 403
    trace.refresh_from_db()
    assert trace.status == "queued"


def _queued_trace(client, conversation) -> Trace:
    client.post(reverse("message_send", args=[conversation.uuid]), {"text": "hello"})
    return Trace.objects.latest("id")


def test_member_stops_a_queued_turn(client_for, alice, conversation, sent_turns):
    c = client_for(alice)
    trace = _queued_trace(c, conversation)
    assert c.post(reverse("trace_cancel", args=[trace.uuid]), HTTP_HX_REQUEST="true").status_code == 204
    trace.refresh_from_db()
    assert trace.status == "cancelled"


def test_approval_of_a_call_that_is_not_waiting_says_so(client_for, alice, conversation, sent_turns):
    c = client_for(alice)
    trace = _queued_trace(c, conversation)
    response = c.post(reverse("approval_decision", args=[trace.uuid, "call_1"]), {"approved": "1"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 409 and b"not waiting for approval" in response.content


def test_charlie_gets_404_on_team_a_chat(client_for, alice, charlie, conversation, sent_turns):
    trace = _queued_trace(client_for(alice), conversation)
    c = client_for(charlie)
    assert c.get(reverse("conversation", args=[conversation.uuid])).status_code == 404
    assert c.post(reverse("message_send", args=[conversation.uuid]), {"text": "hi"}).status_code == 404
    assert c.post(reverse("trace_cancel", args=[trace.uuid])).status_code == 404
    assert c.post(reverse("approval_decision", args=[trace.uuid, "x"]), {"approved": "1"}).status_code == 404
    assert c.post(reverse("conversation_new"), {"agent": str(conversation.agent.uuid)}).status_code == 404
    assert conversation.agent.name.encode() not in c.get(reverse("chat")).content


@pytest.mark.parametrize("count", [3, 30])
def test_conversation_page_queries_are_bounded(client_for, alice, conversation, count, django_assert_max_num_queries):
    for i in range(count):
        Message.objects.create(conversation=conversation, role="user", text=f"m{i}", blocks=[{"type": "text", "text": f"m{i}"}])
    c = client_for(alice)
    with django_assert_max_num_queries(10):
        assert c.get(reverse("conversation", args=[conversation.uuid])).status_code == 200
