"""Who reads which memory inside a team: agent memory everyone; a person's user memory that
person and the team's owners and admins; conversation memory whoever may see the conversation."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Conversation
from agentsite.models import Membership
from memory.models import MemoryEntry
from memory.selectors import memory_visible
from memory.services import MemoryOwner, memory_store

Scope = MemoryEntry.Scope
WIFI = "the office wifi password is hunter2"


@pytest.fixture
def memories(agent, alice, bob, conversation):
    """alice's user memory, agent memory, and a note of alice's (private) conversation."""
    memory_store(owner=MemoryOwner(agent.team_id, agent.pk, alice.pk), key="wifi", content=WIFI)
    memory_store(owner=MemoryOwner(agent.team_id, agent.pk), key="office", scope=Scope.AGENT,
                 content="the office is on the third floor")
    memory_store(owner=MemoryOwner(agent.team_id, agent.pk, alice.pk, conversation.pk), key="plan",
                 scope=Scope.CONVERSATION, content="alice's launch plan is on Friday")
    memory_store(owner=MemoryOwner(agent.team_id, agent.pk, bob.pk), key="colour", content="bob likes red")


def shown(client) -> str:
    response = client.get(reverse("memory"))
    assert response.status_code == 200
    return response.content.decode()


def test_a_viewer_cannot_read_the_owners_user_memory(client_for, vera, memories, team_a):
    c = client_for(vera)
    body = shown(c)
    assert "hunter2" not in body and "bob likes red" not in body and "launch plan" not in body
    assert "the office is on the third floor" in body  # agent memory is everyone's
    # nor by searching for it, or by asking for alice's entries
    searched = c.get(reverse("memory"), {"q": "hunter2"})
    assert list(searched.context["entries"]) == [] and WIFI not in searched.content.decode()
    alice_membership = Membership.objects.get(team=team_a, user__username="alice")
    response = c.get(reverse("memory"), {"member": alice_membership.uuid})
    assert response.status_code == 200 and list(response.context["entries"]) == []


def test_a_member_reads_their_own_user_memory_and_a_shared_conversations(client_for, bob, conversation, memories):
    c = client_for(bob)
    body = shown(c)
    assert "bob likes red" in body and "hunter2" not in body and "launch plan" not in body
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    body = shown(c)
    assert "launch plan is on Friday" in body and "hunter2" not in body


def test_owners_and_admins_read_everyones(client_for, alice, team_a, make_member, memories):
    admin = make_member(team_a, "adam", "admin")
    for person in (alice, admin):
        body = shown(client_for(person))
        assert "hunter2" in body and "bob likes red" in body and "launch plan" in body
        assert "As an admin you see every entry" in body


def test_the_rule_as_a_query(alice, bob, vera, team_a, memories):
    def keys(user):
        return sorted(memory_visible(Membership.objects.get(team=team_a, user=user)).values_list("key", flat=True))

    assert keys(alice) == ["colour", "office", "plan", "wifi"]
    assert keys(bob) == ["colour", "office"]
    assert keys(vera) == ["office"]
    assert list(memory_visible(None)) == []


def test_the_admin_pages_of_memory_stay_closed_to_members_and_viewers(client_for, bob, vera, memories):
    for person in (bob, vera):
        response = client_for(person).get(reverse("admin:memory_memoryentry_changelist"))
        assert response.status_code == 302 and "hunter2" not in response.content.decode()
