"""Memory services: store (upsert), recall (ranking, threshold, limit, empty query, scopes),
forget, auto-save and the turn's memory context. Runs on SQLite (FTS5) and on PostgreSQL
(full text) alike: set DATABASE_URL to run it on PostgreSQL."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from memory.models import MemoryEntry
from memory.search import PostgresSearch, _vector_sql, coverage, search_terms, stem
from memory.services import (
    MemoryOwner,
    memory_autosave,
    memory_context,
    memory_forget,
    memory_recall,
    memory_store,
    memory_turn_start,
)
from tests.members import member_of

Scope = MemoryEntry.Scope


def keys(recalled) -> list[str]:
    return [r.entry.key for r in recalled]


# -- store ----------------------------------------------------------------------------------------
def test_storing_under_an_existing_key_replaces_the_entry(store, alice_owner):
    first = store("favourite_colour", "my favourite colour is green")
    second = store("favourite_colour", "my favourite colour is blue", category="daily")

    assert first.pk == second.pk
    entry = MemoryEntry.objects.get(pk=first.pk)
    assert (entry.content, entry.category, entry.scope, entry.user_id) == (
        "my favourite colour is blue", "daily", "user", alice_owner.user_id)
    assert keys(memory_recall(owner=alice_owner, query="colour")) == ["favourite_colour"]
    assert memory_recall(owner=alice_owner, query="green") == []


def test_the_same_key_is_separate_per_user_and_per_scope(store, agent, alice_owner, bob):
    bob_owner = MemoryOwner(team_id=agent.team_id, agent_id=agent.pk, user_id=bob.pk)
    store("city", "alice lives in Oslo")
    store("city", "bob lives in Lima", owner=bob_owner)
    store("city", "the office is in Bergen", scope=Scope.AGENT)

    assert MemoryEntry.objects.filter(key="city").count() == 3
    mine = memory_recall(owner=alice_owner, query="lives city office")
    assert sorted(r.entry.content for r in mine) == ["alice lives in Oslo", "the office is in Bergen"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"key": "", "content": "x"}, "needs a key"),
    ({"key": "k", "content": "   "}, "content is empty"),
    ({"key": "k", "content": "x" * 10_001}, "the limit is 10,000"),
    ({"key": "k", "content": "x", "scope": "conversation"}, "needs a conversation"),
    ({"key": "k", "content": "x", "scope": "galaxy"}, "Unknown memory scope"),
])
def test_bad_input_is_refused_with_a_plain_message(alice_owner, kwargs, message):
    with pytest.raises(ValidationError, match=message):
        memory_store(owner=alice_owner, **kwargs)


# -- recall ---------------------------------------------------------------------------------------
def test_more_relevant_entries_come_first(store, alice_owner):
    store("pets", "my dog is called Rex")
    store("favourite_colour", "my favourite colour is blue")
    store("food", "my favourite food is pasta")
    store("weather", "it rained all day")

    found = memory_recall(owner=alice_owner, query="What is my favourite colour?", limit=5)

    assert keys(found) == ["favourite_colour", "food"]
    assert [r.score for r in found] == [1.0, 0.5]


def test_entries_below_the_minimum_relevance_are_dropped(store, alice_owner):
    store("trip", "we are going to Rome in May by train")
    store("rome", "Rome is the capital of Italy")

    query = "train tickets to Rome in May"  # words: train, tickets, rome, may
    scores = {r.entry.key: r.score for r in memory_recall(owner=alice_owner, query=query)}
    assert scores == {"trip": 0.75, "rome": 0.25}
    assert keys(memory_recall(owner=alice_owner, query=query, min_relevance=0.4)) == ["trip"]
    assert keys(memory_recall(owner=alice_owner, query=query, min_relevance=0.8)) == []


def test_the_limit_keeps_the_best(store, alice_owner):
    for i in range(8):
        store(f"note_{i}", f"note {i} about the garden" + (" and roses" if i == 5 else ""))
    found = memory_recall(owner=alice_owner, query="garden roses", limit=3)
    assert len(found) == 3 and found[0].entry.key == "note_5" and found[0].score == 1.0
    assert [r.score for r in found[1:]] == [0.5, 0.5]


def test_an_empty_query_lists_the_newest_entries_without_a_score(store, alice_owner):
    for key in ("one", "two", "three"):
        store(key, f"entry {key}")
    found = memory_recall(owner=alice_owner, query="  ", limit=2)
    assert keys(found) == ["three", "two"] and all(r.score is None for r in found)


def test_a_query_of_stop_words_only_finds_nothing(store, alice_owner):
    store("x", "what is it that you are")
    assert memory_recall(owner=alice_owner, query="what is it?") == []


def test_plurals_and_keys_match(store, alice_owner):
    store("favourite_colours", "blue and green")
    assert keys(memory_recall(owner=alice_owner, query="colour", min_relevance=0.4)) == ["favourite_colours"]


def test_recall_is_limited_to_the_owner(store, agent, alice_owner, bob, make_agent, charlie, team_b):
    other_agent = make_agent(name="Other")
    b_agent = make_agent(name="B agent", team=team_b)
    store("plan", "secret plan about the launch")
    memory_store(owner=MemoryOwner(team_id=agent.team_id, agent_id=other_agent.pk,
                                   user_id=alice_owner.user_id),
                 key="plan2", content="launch plan of the other agent")
    memory_store(owner=MemoryOwner(team_id=team_b.pk, agent_id=b_agent.pk, user_id=charlie.pk),
                 key="plan3", content="team B launch plan")
    bob_owner = MemoryOwner(team_id=agent.team_id, agent_id=agent.pk, user_id=bob.pk)

    assert keys(memory_recall(owner=alice_owner, query="launch plan")) == ["plan"]
    assert memory_recall(owner=bob_owner, query="launch plan") == []
    # A team id that does not match the agent finds nothing either.
    forged = MemoryOwner(team_id=team_b.pk, agent_id=agent.pk, user_id=alice_owner.user_id)
    assert memory_recall(owner=forged, query="launch plan") == []


def test_conversation_memory_is_seen_only_in_its_conversation(agent, alice, alice_owner):
    from agents.chat.services import conversation_create

    first = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    second = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    in_first = MemoryOwner(team_id=agent.team_id, agent_id=agent.pk, user_id=alice.pk,
                           conversation_id=first.pk)
    in_second = MemoryOwner(team_id=agent.team_id, agent_id=agent.pk, user_id=alice.pk,
                            conversation_id=second.pk)
    memory_store(owner=in_first, key="draft", content="the draft title is Moonrise",
                 scope=Scope.CONVERSATION)

    assert keys(memory_recall(owner=in_first, query="draft title")) == ["draft"]
    assert memory_recall(owner=in_second, query="draft title") == []
    assert memory_recall(owner=alice_owner, query="draft title") == []


def test_deleting_and_editing_keep_the_search_index_in_step(store, alice_owner):
    entry = store("pet", "a cat named Tom")
    MemoryEntry.objects.filter(pk=entry.pk).update(content="a parrot named Polly")
    assert keys(memory_recall(owner=alice_owner, query="parrot")) == ["pet"]
    assert memory_recall(owner=alice_owner, query="cat Tom") == []
    MemoryEntry.objects.filter(pk=entry.pk).delete()
    assert memory_recall(owner=alice_owner, query="parrot") == []


def test_the_search_backend_is_the_databases_own():
    from memory.search import Fts5Search, PostgresSearch, backend_for

    expected = {"sqlite": Fts5Search, "postgresql": PostgresSearch}[connection.vendor]
    assert isinstance(backend_for(), expected)


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's GIN index")
def test_the_postgresql_search_matches_on_the_indexed_expression(store, alice_owner):
    """The search's statement is written around the vector expression the ORM compiles, which
    must be the GIN index's own (migration 0002), or the planner cannot search the index."""
    store("pet", "My cat is called Tom")
    table, vector, params = _vector_sql(connection.alias)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN SELECT id FROM {table} WHERE {vector} @@ to_tsquery('english', 'cat')", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "memory_entry_search" in plan, plan
    ids = MemoryEntry.objects.filter(team_id=alice_owner.team_id).values("id").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(*PostgresSearch.statement(["cat", "dog"], 5, ids))
        assert [row[0] for row in cursor.fetchall()] == list(MemoryEntry.objects.values_list("id", flat=True))


def test_scores_are_the_share_of_query_words_found():
    terms = search_terms("What is my favourite colour, please?")
    assert terms == ["favourite", "colour"]
    assert coverage(terms, "favourite_colour: blue") == 1.0
    assert coverage(terms, "colours of the flag") == 0.5
    assert (stem("colours"), stem("notes"), stem("matches"), stem("status")) == (
        "colour", "note", "match", "status")


# -- forget ---------------------------------------------------------------------------------------
def test_forget_deletes_only_the_owners_entry(store, agent, alice_owner, bob):
    bob_owner = MemoryOwner(team_id=agent.team_id, agent_id=agent.pk, user_id=bob.pk)
    store("colour", "alice likes blue")
    store("colour", "bob likes red", owner=bob_owner)
    store("colour", "the brand colour is teal", scope=Scope.AGENT)

    assert memory_forget(owner=alice_owner, key="colour") == 1
    assert memory_forget(owner=alice_owner, key="colour") == 0
    assert sorted(MemoryEntry.objects.values_list("content", flat=True)) == [
        "bob likes red", "the brand colour is teal"]


# -- auto-save and the turn's context -------------------------------------------------------------
@pytest.mark.parametrize(("text", "kept"), [
    ("My sister's birthday is on the 3rd of June", True),
    ("too short to keep", False),                       # 17 characters
    ("[cron:daily] run the backup job now please", False),
    ("[Heartbeat task] check the queue length now", False),
])
def test_auto_save_keeps_long_messages_that_are_not_noise(alice_owner, text, kept):
    entry = memory_autosave(owner=alice_owner, text=text, sender="7", message_id="abc123")
    assert (entry is not None) == kept
    if kept:
        assert (entry.key, entry.category, entry.scope) == ("chat_7_abc123", "conversation", "user")


def test_the_context_block_follows_the_rules_of_the_spec(store, alice_owner):
    store("favourite_colour", "my favourite colour is blue")
    store("assistant_resp_1", "your favourite colour is blue")  # never re-injected
    store("colour_history", "favourite colour log")              # never re-injected
    store("food", "favourite food: " + "pasta " * 300)           # cut to 800 characters

    block = memory_context(owner=alice_owner, text="What is my favourite colour?", limit=5,
                           min_relevance=0.4)

    lines = block.splitlines()
    assert lines[0] == "[Memory context]" and block.endswith("[/Memory context]\n\n")
    assert lines[1] == "- favourite_colour: my favourite colour is blue"
    assert lines[2].startswith("- food: favourite food: pasta") and lines[2].endswith("...")
    assert len(lines[2]) == len("- food: ") + 800 + 3
    assert lines[3:] == ["[/Memory context]", ""]


def test_the_context_is_empty_without_a_match_or_with_a_zero_limit(store, alice_owner):
    store("pets", "my dog is called Rex")
    assert memory_context(owner=alice_owner, text="what about the weather", limit=5, min_relevance=0.4) == ""
    assert memory_context(owner=alice_owner, text="my dog", limit=0, min_relevance=0.4) == ""


def test_a_turn_recalls_before_it_auto_saves(alice_owner):
    text = "Remember the meeting with the architects is on Friday"
    block = memory_turn_start(owner=alice_owner, text=text, recall_limit=5, min_relevance=0.4,
                              auto_save=True, sender="7", message_id="m1", trace_id=None)
    assert block == ""  # the message did not recall itself
    again = memory_turn_start(owner=alice_owner, text="When is the meeting with the architects?",
                              recall_limit=5, min_relevance=0.4, auto_save=False, sender="7",
                              message_id="m2", trace_id=None)
    assert "- chat_7_m1: Remember the meeting with the architects is on Friday" in again
    assert MemoryEntry.objects.count() == 1
