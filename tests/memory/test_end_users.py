"""End users behind one API key: each end user's memory is their own, the person's own memory
(stored without an end user: the chat, the person's own API calls) stays the person's, and a
turn for an end user (its conversation's) recalls and stores that end user's memory only."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync

from agents.models import Tool
from agents.tools import ToolContext, runtime_tool_for_row
from agents.turns.services import conversation_create, turn_start
from agents.turns.tasks import turn_run
from memory.models import MemoryEntry
from memory.services import MemoryOwner, memory_forget, memory_recall, memory_store
from tests.members import member_of
from traces.models import StepPayload

pytestmark = pytest.mark.django_db
PIN = "my bank PIN hint is sunflower"


def owner(agent, user, end_user: str = "", conversation=None) -> MemoryOwner:
    return MemoryOwner(team_id=agent.team_id, agent_id=agent.pk, user_id=user.pk,
                       conversation_id=conversation.pk if conversation else None, end_user=end_user)


def recalled(who: MemoryOwner, query: str = "bank PIN hint") -> list[str]:
    return [r.entry.content for r in memory_recall(owner=who, query=query)]


def test_one_end_user_never_recalls_anothers_memory(agent, alice):
    memory_store(owner=owner(agent, alice, "alice"), key="bank_pin_hint", content=PIN)

    assert recalled(owner(agent, alice, "bob")) == []
    assert recalled(owner(agent, alice, "bob"), "") == []  # nor by listing the newest
    assert recalled(owner(agent, alice, "alice")) == [PIN]
    # The person's own memory is not the end users' either way.
    assert recalled(owner(agent, alice)) == []


def test_the_persons_own_memory_is_recalled_as_before_and_by_no_end_user(agent, alice):
    memory_store(owner=owner(agent, alice), key="bank_pin_hint", content="my PIN hint is tulip")

    assert recalled(owner(agent, alice)) == ["my PIN hint is tulip"]
    assert recalled(owner(agent, alice, "alice")) == []
    entry = MemoryEntry.objects.get()
    assert (entry.user_id, entry.end_user, entry.scope) == (alice.pk, "", "user")


def test_the_same_key_is_one_entry_per_end_user_and_forget_reaches_only_ones_own(agent, alice):
    memory_store(owner=owner(agent, alice, "alice"), key="bank_pin_hint", content=PIN)
    memory_store(owner=owner(agent, alice, "bob"), key="bank_pin_hint", content="my PIN hint is oak")
    memory_store(owner=owner(agent, alice), key="bank_pin_hint", content="my PIN hint is tulip")
    memory_store(owner=owner(agent, alice, "bob"), key="bank_pin_hint", content="my PIN hint is elm")

    assert sorted(MemoryEntry.objects.values_list("end_user", "content")) == [
        ("", "my PIN hint is tulip"), ("alice", PIN), ("bob", "my PIN hint is elm")]
    assert memory_forget(owner=owner(agent, alice, "bob"), key="bank_pin_hint") == 1
    assert recalled(owner(agent, alice, "alice")) == [PIN]
    assert recalled(owner(agent, alice)) == ["my PIN hint is tulip"]


def test_the_memory_tools_are_bound_to_the_turns_end_user(agent, alice):
    row, _ = Tool.objects.get_or_create(team=agent.team, name="memory_store", defaults={"kind": "builtin"})
    recall_row, _ = Tool.objects.get_or_create(team=agent.team, name="memory_recall",
                                               defaults={"kind": "builtin"})

    def tool(row, end_user):
        return runtime_tool_for_row(row, ToolContext(team_id=agent.team_id, agent_id=agent.pk,
                                                     user_id=alice.pk, end_user=end_user))

    # An "end_user" argument of the model's changes nothing.
    async_to_sync(tool(row, "alice").execute)({"content": PIN, "key": "bank_pin_hint", "end_user": "bob"})
    as_bob = async_to_sync(tool(recall_row, "bob").execute)({"query": "bank PIN hint", "end_user": "alice"})
    as_alice = async_to_sync(tool(recall_row, "alice").execute)({"query": "bank PIN hint"})

    assert as_bob.output.startswith("No memories match")
    assert as_alice.output == f"- bank_pin_hint: {PIN}"
    assert MemoryEntry.objects.get().end_user == "alice"


@pytest.mark.django_db(transaction=True)
def test_a_turn_for_an_end_user_stores_and_recalls_theirs_only(make_agent, alice, sent_turns, use_redis):
    agent = make_agent(name="Memory", tools=("memory_store", "memory_recall"))
    membership = member_of(alice, agent.team)

    def answer(end_user: str, text: str):
        conversation = conversation_create(membership=membership, agent=agent, end_user=end_user)
        trace = turn_start(conversation=conversation, membership=membership, text=text)
        assert turn_run(trace.pk) == "completed"
        trace.refresh_from_db()
        return trace

    answer("alice", "Remember that my bank PIN hint is sunflower")
    entry = MemoryEntry.objects.get()
    assert (entry.user_id, entry.end_user) == (alice.pk, "alice")

    bobs = answer("bob", "What is my bank PIN hint?")
    assert "sunflower" not in bobs.answer
    # Nor was it put in the model's context at the turn's start.
    request = StepPayload.objects.get(step__trace=bobs, step__seq=1, kind="request").content
    assert "sunflower" not in request
    assert "sunflower" not in answer("", "What is my bank PIN hint?").answer  # the person's own
    alices = answer("alice", "What is my bank PIN hint?")
    assert "sunflower" in alices.answer
    request = json.loads(StepPayload.objects.get(step__trace=alices, step__seq=1, kind="request").content)
    assert "[Memory context]" in json.dumps(request["system"])
