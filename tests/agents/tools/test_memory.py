"""The memory tools: bound to their turn's team, agent and user whatever the model passes; and the
demo assistant remembering and recalling through real turns."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync

from agents.models import Tool
from agents.runtime.tools import ToolError
from agents.tools import ToolContext, runtime_tool_for_row
from memory.models import MemoryEntry
from memory.services import MemoryOwner, memory_store
from tests.members import member_of


def tool_for(name: str, *, team, agent, user, **context):
    row, _ = Tool.objects.get_or_create(team=team, name=name, defaults={"kind": "builtin"})
    return runtime_tool_for_row(row, ToolContext(team_id=team.pk, agent_id=agent.pk,
                                                 user_id=user.pk, **context))


def call(tool, arguments):
    return async_to_sync(tool.execute)(arguments)


@pytest.fixture
def secrets_of_team_b(make_agent, team_b, charlie):
    agent = make_agent(name="B agent", team=team_b, tools=())
    owner = MemoryOwner(team_id=team_b.pk, agent_id=agent.pk, user_id=charlie.pk)
    memory_store(owner=owner, key="launch_codes", content="the launch codes are 0000")
    memory_store(owner=owner, key="roadmap", content="team B roadmap", scope="agent")
    return agent


def test_a_model_cannot_reach_another_teams_memory(make_agent, alice, secrets_of_team_b):
    agent = make_agent(name="A agent", tools=())
    kwargs = {"team": agent.team, "agent": agent, "user": alice}
    recall, forget = tool_for("memory_recall", **kwargs), tool_for("memory_forget", **kwargs)

    # Keys, ids and team names of team B in the arguments change nothing.
    for arguments in ({"query": "launch codes"}, {"query": "roadmap"},
                      {"query": "launch_codes", "team": secrets_of_team_b.team_id,
                       "agent": secrets_of_team_b.pk, "user": 1}):
        result = call(recall, arguments)
        assert result.success and result.output.startswith("No memories match")
    with pytest.raises(ToolError, match="Nothing is stored under the key 'launch_codes'"):
        call(forget, {"key": "launch_codes", "team": secrets_of_team_b.team_id})
    assert MemoryEntry.objects.filter(team_id=secrets_of_team_b.team_id).count() == 2


def test_a_stored_memory_belongs_to_the_turns_team_agent_and_user(make_agent, alice, team_b):
    agent = make_agent(name="A agent", tools=())
    store = tool_for("memory_store", team=agent.team, agent=agent, user=alice, trace_id=None)

    result = call(store, {"content": "my favourite colour is blue", "key": "favourite_colour",
                          "team": team_b.pk, "user_id": 999})

    assert result.output == "Saved to memory about this user under the key 'favourite_colour'."
    entry = MemoryEntry.objects.get()
    assert (entry.team_id, entry.agent_id, entry.user_id, entry.scope) == (
        agent.team_id, agent.pk, alice.pk, "user")


def test_users_of_one_agent_do_not_see_each_others_memory(make_agent, alice, bob):
    agent = make_agent(name="Shared", tools=())
    call(tool_for("memory_store", team=agent.team, agent=agent, user=alice),
         {"content": "my password hint is the name of my first cat"})
    result = call(tool_for("memory_recall", team=agent.team, agent=agent, user=bob),
                  {"query": "password hint"})
    assert result.output.startswith("No memories match")


def test_recall_lists_matches_best_first_and_forget_removes_them(make_agent, alice):
    agent = make_agent(name="Keeper", tools=())
    kwargs = {"team": agent.team, "agent": agent, "user": alice}
    store = tool_for("memory_store", **kwargs)
    call(store, {"content": "my favourite colour is blue", "key": "favourite_colour"})
    call(store, {"content": "my favourite food is pasta", "key": "favourite_food"})

    result = call(tool_for("memory_recall", **kwargs), {"query": "favourite colour"})
    assert result.output == ("- favourite_colour: my favourite colour is blue\n"
                             "- favourite_food: my favourite food is pasta")

    assert call(tool_for("memory_forget", **kwargs), {"key": "favourite_colour"}).output == (
        "Forgot the memory 'favourite_colour'.")
    assert list(MemoryEntry.objects.values_list("key", flat=True)) == ["favourite_food"]


def test_invalid_memory_arguments_are_a_tool_error(make_agent, alice):
    agent = make_agent(name="Strict", tools=())
    store = tool_for("memory_store", team=agent.team, agent=agent, user=alice)
    with pytest.raises(ToolError, match="'scope': 'agent' is not one of"):
        call(store, {"content": "x", "scope": "agent"})
    with pytest.raises(ToolError, match="'content' is a required property"):
        call(store, {"key": "x"})


# -- the demo assistant, through the real task ----------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_the_demo_assistant_remembers_and_recalls_across_conversations(
        make_agent, alice, sent_turns, use_redis):
    from agents.chat.services import conversation_create
    from agents.turns.services import turn_start
    from agents.turns.tasks import turn_run
    from traces.models import StepPayload

    agent = make_agent(name="Demo memory", tools=("memory_store", "memory_recall", "memory_forget"))
    first = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=first, membership=member_of(alice, first), text="Remember that my favourite colour is blue")
    assert turn_run(trace.pk) == "completed"
    trace.refresh_from_db()
    assert trace.answer == "Got it, I'll remember that your favourite colour is blue."
    entry = MemoryEntry.objects.get()
    assert (entry.key, entry.content, entry.user_id, entry.source_trace_id) == (
        "favourite_colour", "my favourite colour is blue", alice.pk, trace.pk)

    second = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=second, membership=member_of(alice, second), text="What is my favourite colour?")
    assert turn_run(trace.pk) == "completed"
    trace.refresh_from_db()
    assert trace.answer == ("Here is what I remember about favourite colour:\n"
                            "- favourite_colour: my favourite colour is blue")
    # The memory was also recalled into the system prompt at the turn's start.
    request = json.loads(StepPayload.objects.get(step__trace=trace, step__seq=1, kind="request").content)
    assert ("[Memory context]\n- favourite_colour: my favourite colour is blue\n[/Memory context]"
            in json.dumps(request["system"], ensure_ascii=False).replace("\\n", "\n"))

    trace = turn_start(conversation=second, membership=member_of(alice, second), text="Forget my favourite colour")
    assert turn_run(trace.pk) == "completed"
    assert not MemoryEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_agent_that_auto_saves_keeps_long_messages(make_agent, alice, sent_turns, use_redis):
    from agents.chat.services import conversation_create
    from agents.turns.services import turn_start
    from agents.turns.tasks import turn_run

    agent = make_agent(name="Autosaver", tools=(), memory_auto_save=True)
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="I am planning a trip to Lisbon in spring")
    turn_run(trace.pk)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello there")
    turn_run(trace.pk)

    entry = MemoryEntry.objects.get()
    assert entry.content == "I am planning a trip to Lisbon in spring"
    assert (entry.category, entry.scope, entry.user_id) == ("conversation", "user", alice.pk)
