"""The chat pages and their actions (send, manage, branch), by role and team; the stop and
approve buttons too where a page shows them. (The turn endpoints alone: ``tests/agents/turns``.)"""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Conversation, Message
from tests.members import member_of
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
    assert f'id="message-{trace.user_message.uuid.hex}"' in body and f'id="answer-{trace.uuid.hex}"' in body
    assert "what is 2+2?" in body
    # the first message names the conversation, and the heading follows at once
    assert '<h1 id="chat-title" hx-swap-oob="true">what is 2+2?</h1>' in body
    later = c.post(reverse("message_send", args=[conversation.uuid]), {"text": "and 3+3?"}, HTTP_HX_REQUEST="true")
    assert 'id="chat-title"' not in later.content.decode()


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


def test_viewer_reads_a_shared_conversation_but_cannot_send_or_stop(client_for, alice, conversation, queued_trace,
                                                                     vera):
    c = client_for(vera)
    assert c.get(reverse("conversation", args=[conversation.uuid])).status_code == 404  # private
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    assert c.get(reverse("conversation", args=[conversation.uuid])).status_code == 200
    assert c.post(reverse("message_send", args=[conversation.uuid]), {"text": "hi"}).status_code == 403
    trace = queued_trace(client_for(alice))
    assert c.post(reverse("trace_cancel", args=[trace.uuid])).status_code == 403
    trace.refresh_from_db()
    assert trace.status == "queued"


def test_charlie_gets_404_on_team_a_chat(client_for, alice, charlie, conversation, queued_trace):
    trace = queued_trace(client_for(alice))
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
    c.get(reverse("conversation", args=[conversation.uuid]))  # the process reads the prices once
    # The session, the membership, the conversation; the chat's turns (with the reader's
    # ratings and the meter's last request), messages and tool steps; the context window (kept
    # with the team's configuration: its stamp); the sidebar; the budgets.
    with django_assert_max_num_queries(9):
        assert c.get(reverse("conversation", args=[conversation.uuid])).status_code == 200


# -- the conversation list: search, rename, archive, delete -------------------------------------------
def listed(response) -> str:
    body = response.content.decode()
    return body[body.index('id="conversation-list"'):]


def test_the_list_searches_titles_and_messages(client_for, alice, agent, sent_turns):
    from agents.chat import services
    from agents.turns import services as turns

    weather = services.conversation_create(agent=agent, membership=member_of(alice, agent.team), title="Weather talk")
    recipes = services.conversation_create(agent=agent, membership=member_of(alice, agent.team), title="Cooking")
    turns.turn_start(conversation=recipes, membership=member_of(alice, recipes), text="How long do I boil an egg?")
    c = client_for(alice)
    by_title = c.get(reverse("chat"), {"q": "weather"}).content.decode()
    assert "Weather talk" in by_title and "Cooking" not in by_title
    by_message = c.get(reverse("chat"), {"q": "BOIL an"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="conversation-list")
    body = by_message.content.decode()
    assert "Cooking" in body and "Weather talk" not in body and "<html" not in body
    assert "No conversation matches" in c.get(reverse("chat"), {"q": "zebra"}).content.decode()
    assert weather.title in c.get(reverse("chat")).content.decode()


def test_mine_and_team_lists_show_a_teammates_conversation_once_shared(client_for, alice, bob, agent, sent_turns):
    from agents.chat import services

    plan = services.conversation_create(agent=agent, membership=member_of(alice, agent.team), title="Alice's plan")
    services.conversation_create(agent=agent, membership=member_of(alice, agent.team), title="Alice's diary")
    mine = client_for(bob).get(reverse("chat")).content.decode()
    team = client_for(bob).get(reverse("chat"), {"scope": "team"}).content.decode()
    assert "Alice&#x27;s plan" not in mine and "Alice&#x27;s plan" not in team and "Alice&#x27;s diary" not in team
    services.conversation_share(conversation=plan, membership=member_of(alice, plan), shared=True)
    team = listed(client_for(bob).get(reverse("chat"), {"scope": "team"}))
    assert "Alice&#x27;s plan" in team and "Shared" in team and "Alice&#x27;s diary" not in team
    assert "Alice&#x27;s plan" not in listed(client_for(bob).get(reverse("chat")))


def test_owner_renames_archives_and_deletes(client_for, alice, conversation, sent_turns):
    from agents.turns import services as turns

    trace = turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    c = client_for(alice)
    assert c.post(reverse("conversation_rename", args=[conversation.uuid]), {"title": "  Trip   plans "}).status_code == 302
    conversation.refresh_from_db()
    assert conversation.title == "Trip plans"

    c.post(reverse("conversation_archive", args=[conversation.uuid]), {"archived": "1"})
    conversation.refresh_from_db()
    assert conversation.archived
    assert "Trip plans" not in listed(c.get(reverse("chat")))
    assert "Trip plans" in listed(c.get(reverse("chat"), {"archived": "1"}))
    refused = c.post(reverse("message_send", args=[conversation.uuid]), {"text": "hi"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 422 and b"archived" in refused.content
    page = c.get(reverse("conversation", args=[conversation.uuid])).content.decode()
    assert 'id="composer"' not in page and "read-only" in page
    c.post(reverse("conversation_archive", args=[conversation.uuid]), {"archived": "0"})
    conversation.refresh_from_db()
    assert not conversation.archived

    response = c.post(reverse("conversation_delete", args=[conversation.uuid]))
    assert response.status_code == 302 and response.url == reverse("chat")
    conversation.refresh_from_db()
    assert conversation.deleted_at is not None
    assert c.get(reverse("conversation", args=[conversation.uuid])).status_code == 404
    assert "Trip plans" not in listed(c.get(reverse("chat"), {"scope": "team"}))
    trace.refresh_from_db()
    assert trace.status == "cancelled"  # its turn stopped; the trace stays for the records
    assert c.post(reverse("message_send", args=[conversation.uuid]), {"text": "hi"}).status_code == 404


def test_only_the_starter_or_an_admin_manages_a_conversation(client_for, alice, bob, conversation, team_a, make_member, vera):
    # private: bob does not even find it
    assert client_for(bob).post(reverse("conversation_rename", args=[conversation.uuid]), {"title": "mine now"}).status_code == 404
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    # shared: he reads it, and is told plainly that he may not manage it
    refused = client_for(bob).post(reverse("conversation_rename", args=[conversation.uuid]), {"title": "mine now"})
    assert refused.status_code == 403 and b"Only the conversation&#x27;s owner or a team admin can rename it." in refused.content
    assert client_for(bob).post(reverse("conversation_delete", args=[conversation.uuid])).status_code == 403
    assert client_for(bob).post(reverse("conversation_share", args=[conversation.uuid]), {"shared": "0"}).status_code == 403
    assert client_for(vera).post(reverse("conversation_archive", args=[conversation.uuid])).status_code == 403
    conversation.refresh_from_db()
    assert conversation.title == "" and conversation.deleted_at is None and not conversation.archived
    assert conversation.shared
    admin = make_member(team_a, "adam", "admin")
    client_for(admin).post(reverse("conversation_rename", args=[conversation.uuid]), {"title": "Renamed by an admin"})
    conversation.refresh_from_db()
    assert conversation.title == "Renamed by an admin"


def test_charlie_gets_404_on_every_chat_action(client_for, alice, charlie, conversation, sent_turns):
    from agents.turns import services as turns

    trace = turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    c = client_for(charlie)
    for name, args, data in [
        ("conversation_rename", [conversation.uuid], {"title": "x"}),
        ("conversation_archive", [conversation.uuid], {}),
        ("conversation_delete", [conversation.uuid], {}),
        ("turn_regenerate", [conversation.uuid, trace.uuid], {}),
        ("message_edit", [conversation.uuid, trace.user_message.uuid], {"text": "x"}),
        ("message_send", [conversation.uuid], {"text": "/help"}),
    ]:
        assert c.post(reverse(name, args=args), data).status_code == 404, name
    assert c.get(reverse("conversation", args=[conversation.uuid]), {"at": trace.uuid.hex}).status_code == 404
    assert str(conversation.uuid) not in c.get(reverse("chat"), {"q": "hello", "scope": "team"}).content.decode()


def test_viewers_read_shared_branches_but_cannot_edit_or_regenerate(client_for, alice, conversation, sent_turns, vera):
    from agents.turns import services as turns

    trace = turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    Trace.objects.filter(pk=trace.pk).update(status="completed")
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    c = client_for(vera)
    page = c.get(reverse("conversation", args=[conversation.uuid]), {"at": trace.uuid.hex})
    assert page.status_code == 200 and "hello" in page.content.decode()
    assert c.post(reverse("turn_regenerate", args=[conversation.uuid, trace.uuid])).status_code == 403
    assert c.post(reverse("message_edit", args=[conversation.uuid, trace.user_message.uuid]), {"text": "x"}).status_code == 403
    assert Trace.objects.count() == 1


def test_regenerate_and_edit_answer_with_the_new_branch(client_for, alice, conversation, sent_turns):
    from agents.turns import services as turns

    trace = turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    Trace.objects.filter(pk=trace.pk).update(status="completed")
    c = client_for(alice)
    response = c.post(reverse("turn_regenerate", args=[conversation.uuid, trace.uuid]), HTTP_HX_REQUEST="true")
    again = Trace.objects.latest("id")
    body = response.content.decode()
    assert response.status_code == 200 and again.user_message_id == trace.user_message_id
    assert f'data-leaf="{again.uuid.hex}"' in body and 'hx-swap-oob="true"' in body
    assert response["HX-Push-Url"].endswith(f"?at={again.uuid.hex}")
    Trace.objects.filter(pk=again.pk).update(status="completed")

    edit = c.post(reverse("message_edit", args=[conversation.uuid, trace.user_message.uuid]), {"text": "hello again"})
    edited = Trace.objects.latest("id")
    assert edit.status_code == 302 and edit.url.endswith(f"?at={edited.uuid.hex}")
    page = c.get(edit.url).content.decode()
    assert "hello again" in page and "2/2" in page
    empty = c.post(reverse("message_edit", args=[conversation.uuid, trace.user_message.uuid]), {"text": " "},
                   HTTP_HX_REQUEST="true")
    assert empty.status_code == 422 and b"Write a message" in empty.content


def test_the_composer_continues_the_branch_on_screen(client_for, alice, conversation, sent_turns):
    from agents.turns import services as turns

    first = turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text="one")
    Trace.objects.filter(pk=first.pk).update(status="completed")
    other = turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text="elsewhere", parent=None)
    Trace.objects.filter(pk=other.pk).update(status="completed")
    c = client_for(alice)
    c.post(reverse("message_send", args=[conversation.uuid]), {"text": "two", "parent": first.uuid.hex})
    assert Message.objects.get(text="two").parent_turn_id == first.pk
    assert c.post(reverse("message_send", args=[conversation.uuid]), {"text": "x", "parent": "not-a-uuid"}).status_code == 404


def test_the_conversation_page_queries_stay_bounded_with_branches_and_tools(
        client_for, alice, conversation, sent_turns, django_assert_max_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from agents.turns import services as turns
    from traces.models import Step, StepPayload

    def grow(count):
        for i in range(count):
            first = turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text=f"question {i}")
            Trace.objects.filter(pk=first.pk).update(status="completed")
            first.refresh_from_db()
            trace = turns.turn_regenerate(conversation=conversation, trace=first, membership=member_of(alice, conversation))
            Trace.objects.filter(pk=trace.pk).update(status="completed")
            Message.objects.create(conversation=conversation, role="assistant", trace=trace, text="",
                                   blocks=[{"type": "tool_use", "id": f"c{i}", "name": "calculator", "input": {"expression": "1+1"}}])
            Message.objects.create(conversation=conversation, role="tool", trace=trace,
                                   blocks=[{"type": "tool_result", "tool_use_id": f"c{i}", "output": "2", "is_error": False}])
            Message.objects.create(conversation=conversation, role="assistant", trace=trace, text=f"**answer** {i}",
                                   blocks=[{"type": "text", "text": f"answer {i}"}])
            step = Step.objects.create(trace=trace, seq=2, kind="tool_call", status="ok", name="calculator",
                                       call_id=f"c{i}", started_at=timezone.now(), duration_ms=3, meta={"output_preview": "2"})
            StepPayload.objects.create(step=step, kind="arguments", content='{"expression": "1+1"}')

    c = client_for(alice)
    url = reverse("conversation", args=[conversation.uuid])
    grow(3)
    c.get(url)  # the process reads the prices once
    with CaptureQueriesContext(connection) as few:
        small = c.get(url)
    assert small.status_code == 200 and "calculator" in small.content.decode()
    grow(27)
    # the chat's own reads are three (turns with the reader's ratings and the meter's last
    # request, branch messages with the loose ones, steps with their arguments' start), the
    # meter reads the model's settings row and the catalogue's stamp, one lists the sidebar
    with django_assert_max_num_queries(len(few)):
        big = c.get(url)
    body = big.content.decode()
    assert len(few) <= 10 and big.status_code == 200 and body.count('class="message role-user"') == 30
    assert body.count('class="tool-card state-ok"') == 30 and body.count("<strong>answer</strong>") == 30
    assert body.count("<span>2/2</span>") == 30
