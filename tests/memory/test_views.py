"""The memory page (what an agent remembers about whom) and memory in the admin."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agentsite.models import AuditEvent, Membership
from memory.models import MemoryEntry
from memory.services import MemoryOwner, memory_store


@pytest.fixture
def remembered(agent, alice, bob, make_agent):
    other = make_agent(name="Other agent", tools=())
    memory_store(owner=MemoryOwner(agent.team_id, agent.pk, alice.pk), key="colour",
                 content="alice likes <b>blue</b>")
    memory_store(owner=MemoryOwner(agent.team_id, agent.pk, bob.pk), key="colour",
                 content="bob likes red")
    memory_store(owner=MemoryOwner(agent.team_id, other.pk, alice.pk), key="city",
                 content="alice lives in Oslo")
    return other


def test_the_owner_sees_what_agents_remember_escaped(client_for, alice, remembered):
    response = client_for(alice).get(reverse("memory"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "alice likes &lt;b&gt;blue&lt;/b&gt;" in html and "<b>blue</b>" not in html
    assert "bob likes red" in html and "alice lives in Oslo" in html  # an owner sees everyone's


def test_a_member_sees_only_their_own_user_memory(client_for, bob, remembered):
    response = client_for(bob).get(reverse("memory"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "bob likes red" in html
    assert "alice likes" not in html and "alice lives in Oslo" not in html


def test_the_page_filters_by_agent_and_person(client_for, alice, agent, remembered, team_a):
    membership = Membership.objects.get(team=team_a, user=alice)
    response = client_for(alice).get(reverse("memory"), {"agent": agent.uuid, "member": membership.uuid})
    assert [e.content for e in response.context["entries"]] == ["alice likes <b>blue</b>"]
    response = client_for(alice).get(reverse("memory"), {"agent": remembered.uuid})
    assert [e.content for e in response.context["entries"]] == ["alice lives in Oslo"]


def test_another_team_sees_nothing_and_its_filters_are_404(client_for, charlie, agent, remembered, team_a):
    client = client_for(charlie)
    response = client.get(reverse("memory"))
    assert response.status_code == 200 and list(response.context["entries"]) == []
    assert "bob likes red" not in response.content.decode()
    assert client.get(reverse("memory"), {"agent": agent.uuid}).status_code == 404
    member = Membership.objects.filter(team=team_a).first()
    assert client.get(reverse("memory"), {"member": member.uuid}).status_code == 404


def test_the_page_runs_a_bounded_number_of_queries(client_for, alice, agent, make_member, team_a,
                                                   django_assert_max_num_queries):
    for i in range(60):
        user = make_member(team_a, f"user{i}")
        memory_store(owner=MemoryOwner(agent.team_id, agent.pk, user.pk), key=f"k{i}", content=f"fact {i}")
    client = client_for(alice)
    with django_assert_max_num_queries(11):  # 10, and one for the site's budget banner
        response = client.get(reverse("memory"))
    assert len(response.context["entries"]) == 50


def test_anonymous_visitors_are_sent_to_log_in(client):
    response = client.get(reverse("memory"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


# -- admin ----------------------------------------------------------------------------------------
CHANGELIST = "admin:memory_memoryentry_changelist"


def test_the_admin_lists_and_searches_the_teams_memory_only(client_for, alice, charlie, remembered,
                                                           agent, make_member, team_a,
                                                           django_assert_max_num_queries):
    for i in range(30):
        user = make_member(team_a, f"user{i}")
        memory_store(owner=MemoryOwner(agent.team_id, agent.pk, user.pk), key=f"k{i}",
                     content=f"fact {i} about Oslo")
    client = client_for(alice)
    with django_assert_max_num_queries(16):
        assert client.get(reverse(CHANGELIST)).status_code == 200
    response = client.get(reverse(CHANGELIST), {"q": "lives in Oslo"})
    html = response.content.decode()
    assert "alice lives in Oslo" in html and "bob likes red" not in html
    assert client_for(charlie).get(reverse(CHANGELIST)).content.decode().count("likes") == 0


def test_bulk_delete_is_scoped_and_audited(client_for, alice, remembered, make_agent, team_b, charlie):
    b_agent = make_agent(name="B", team=team_b, tools=())
    theirs = memory_store(owner=MemoryOwner(team_b.pk, b_agent.pk, charlie.pk), key="x", content="team B fact")
    mine = list(MemoryEntry.objects.filter(team=alice.memberships.get().team).values_list("pk", flat=True))

    response = client_for(alice).post(reverse(CHANGELIST), {
        "action": "delete_selected", "_selected_action": [*mine, theirs.pk], "post": "yes"})

    assert response.status_code == 302
    assert list(MemoryEntry.objects.values_list("pk", flat=True)) == [theirs.pk]
    assert AuditEvent.objects.filter(object_type="memory.MemoryEntry", action="delete").count() == 3


def test_an_admin_writes_agent_memory_for_everyone(client_for, alice, agent, team_a, bob):
    response = client_for(alice).post(reverse("admin:memory_memoryentry_add"), {
        "team": team_a.pk, "scope": "agent", "agent": agent.pk, "key": "office",
        "content": "The office is in Bergen.", "category": "core"})
    assert response.status_code == 302
    from memory.services import memory_recall

    found = memory_recall(owner=MemoryOwner(team_a.pk, agent.pk, bob.pk), query="where is the office")
    assert [r.entry.content for r in found] == ["The office is in Bergen."]


def test_the_admin_refuses_an_agent_of_another_team(client_for, alice, team_a, make_agent, team_b):
    stranger = make_agent(name="Stranger", team=team_b, tools=())
    response = client_for(alice).post(reverse("admin:memory_memoryentry_add"), {
        "team": team_a.pk, "scope": "agent", "agent": stranger.pk, "key": "k", "content": "c",
        "category": "core"})
    assert response.status_code == 200 and not MemoryEntry.objects.exists()


def test_renaming_an_entry_to_a_key_its_owner_uses_is_refused(client_for, alice, alice_owner, store):
    store("colour", "blue")
    other = store("food", "pasta")
    url = reverse("admin:memory_memoryentry_change", args=[other.pk])
    response = client_for(alice).post(url, {"key": "colour", "content": "pasta", "category": "core"})
    assert response.status_code == 200 and "already has this key" in response.content.decode()
    response = client_for(alice).post(url, {"key": "meal", "content": "pasta", "category": "core"})
    assert response.status_code == 302 and MemoryEntry.objects.get(pk=other.pk).key == "meal"
