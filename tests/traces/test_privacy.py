"""Who sees which trace inside a team: owners and admins every one (and the pages say so),
members and viewers those of their own conversations and of shared ones; any other is a 404 in
the list, the inspector, step payloads, the export, re-pricing, the costs page and the socket."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse
from django.utils import timezone

from agents.chat.services import conversation_create
from agents.models import Conversation, Message
from tests.helpers import communicator, session_cookie
from tests.members import member_of
from traces.models import ConversationCostRollup, CostRollup, Trace
from traces.record.selectors import ADMIN_NOTICE
from traces.sample import make_sample_trace

NOTICE = "You see every trace of this team as an admin."


def trace_urls(trace) -> list[str]:
    code = trace.uuid
    return [reverse(name, args=args) for name, args in [
        ("trace_detail", [code]),
        ("trace_changes", [code]),
        ("trace_steps_chunk", [code]),
        ("trace_states_chunk", [code]),
        ("step_detail", [code, 1]),
        ("step_payload_download", [code, 1, "request"]),
        ("trace_export", [code]),
        ("trace_reprice", [code]),
    ]]


@pytest.fixture
def bobs_trace(agent, bob):
    """A finished trace of bob's private conversation."""
    private = conversation_create(agent=agent, membership=member_of(bob, agent.team), title="Bob's private notes")
    trace = make_sample_trace(conversation=private, user=bob, steps=4)
    Trace.objects.filter(pk=trace.pk).update(answer="bob's secret answer")
    Message.objects.filter(pk=trace.user_message_id).update(text="bob asks privately")
    return trace


def test_the_notice_is_the_one_the_rules_name():
    assert ADMIN_NOTICE == NOTICE


def test_a_teammate_gets_404_on_every_page_of_a_private_trace(client_for, bob, vera, sample_trace):
    for person in (bob, vera):
        c = client_for(person)
        for url in trace_urls(sample_trace):
            assert c.get(url).status_code == 404, url
        listing = c.get(reverse("traces"), {"q": "Generated"}).content.decode()
        assert "Generated question" not in listing and sample_trace.uuid.hex not in listing


def test_a_shared_conversations_traces_are_read_by_the_team(client_for, bob, vera, conversation, sample_trace):
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    for person in (bob, vera):
        c = client_for(person)
        for url in trace_urls(sample_trace):
            assert c.get(url).status_code == 200, url
        detail = c.get(reverse("trace_detail", args=[sample_trace.uuid])).content.decode()
        assert NOTICE not in detail
        # stop and approve are the owner's and the admins': the page hides them for a reader
        assert "data-read-only" in detail.split("<body", 1)[1].split(">", 1)[0]
        assert "Generated question" in c.get(reverse("traces")).content.decode()


def test_the_owner_sees_a_members_private_traces_and_is_told_so(client_for, alice, bob, bobs_trace):
    c = client_for(alice)
    listing = c.get(reverse("traces")).content.decode()
    assert "bob asks privately" in listing and NOTICE in listing
    detail = c.get(reverse("trace_detail", args=[bobs_trace.uuid])).content.decode()
    assert NOTICE in detail and "a private conversation of bob" in detail
    assert "data-read-only" not in detail.split("<body", 1)[1].split(">", 1)[0]
    for url in trace_urls(bobs_trace):
        assert c.get(url).status_code == 200, url
    # bob sees his own, without the admin's notice
    own = client_for(bob).get(reverse("traces")).content.decode()
    assert "bob asks privately" in own and NOTICE not in own


def test_the_export_of_a_private_trace_reaches_only_who_may_see_it(client_for, alice, bob, vera, bobs_trace):
    url = reverse("trace_export", args=[bobs_trace.uuid])
    assert client_for(vera).get(url).status_code == 404
    exported = b"".join(client_for(alice).get(url).streaming_content).decode()
    assert "bob's secret answer" in exported
    assert b"".join(client_for(bob).get(url).streaming_content).decode() == exported


def test_the_costs_page_names_only_the_conversations_one_may_see(client_for, alice, vera, bobs_trace, team_a):
    day = timezone.localdate()
    amounts = {"calls": 1, "cost_units": 5_000_000, "input_tokens": 10, "output_tokens": 5}
    conversation = bobs_trace.conversation
    CostRollup.objects.create(team=team_a, day=day, agent_id=bobs_trace.agent_id, user_id=bobs_trace.user_id,
                              provider="Demo", model="demo", **amounts)
    ConversationCostRollup.objects.create(team=team_a, day=day, conversation_id=conversation.pk,
                                          agent_id=bobs_trace.agent_id, user_id=bobs_trace.user_id,
                                          provider="Demo", model="demo", **amounts)
    url = reverse("costs")
    viewer = client_for(vera).get(url, {"split": "conversation"})
    body = viewer.content.decode()
    assert viewer.context["totals"].cost > 0  # the team's spend is everyone's to read
    assert "Bob&#x27;s private notes" not in body and str(conversation.uuid) not in body
    assert "(a private conversation)" in body and bobs_trace.uuid.hex not in body
    assert viewer.context["top_traces"] == []
    owner = client_for(alice).get(url, {"split": "conversation"})
    assert "Bob&#x27;s private notes" in owner.content.decode()
    assert [t.pk for t in owner.context["top_traces"]] == [bobs_trace.pk]
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    shared = client_for(vera).get(url, {"split": "conversation"})
    assert "Bob&#x27;s private notes" in shared.content.decode()
    assert [t.pk for t in shared.context["top_traces"]] == [bobs_trace.pk]


def test_the_trace_list_still_runs_a_bounded_number_of_queries(client_for, bob, agent, django_assert_max_num_queries):
    own = conversation_create(agent=agent, membership=member_of(bob, agent.team))
    for _ in range(30):
        make_sample_trace(conversation=own, user=bob, steps=2)
    c = client_for(bob)
    c.get(reverse("traces"))  # the first page after signing in keeps the active team in the session
    with django_assert_max_num_queries(10):  # the same bound as an admin's list (test_views)
        response = c.get(reverse("traces"))
    assert response.status_code == 200 and len(response.context["traces"]) == 25


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("close_thread_connections")
async def test_the_socket_of_a_private_trace_refuses_teammates_and_admits_admins(alice, bob, vera, sample_trace):
    path = f"/ws/traces/{sample_trace.uuid}/"
    for person in (bob, vera):
        cookie = await sync_to_async(session_cookie)(person)
        connected, code = await communicator(path, cookie=cookie).connect()
        assert not connected and code == 4403
    await sync_to_async(Conversation.objects.filter(pk=sample_trace.conversation_id).update)(shared=True)
    ws = communicator(path, cookie=await sync_to_async(session_cookie)(bob))
    assert (await ws.connect())[0]
    await ws.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("close_thread_connections")
async def test_the_owner_follows_a_members_private_trace_live(alice, bobs_trace):
    ws = communicator(f"/ws/traces/{bobs_trace.uuid}/", cookie=await sync_to_async(session_cookie)(alice))
    assert (await ws.connect())[0]
    await ws.disconnect()

