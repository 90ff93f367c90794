"""``update_returning``: an update that reads back what it wrote, in one statement, with the
values converted as the ORM reads them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import DatabaseError
from django.db.models import F, Value, signals
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.models import Conversation, Message
from agentsite.db import returning
from agentsite.db.returning import update_returning
from tests.helpers import work_counted
from traces.models import Step, StepPayload, Trace

pytestmark = pytest.mark.django_db


@pytest.fixture
def trace(make_agent, alice):
    agent = make_agent(name="Returning")
    conversation = Conversation.objects.create(team=agent.team, agent=agent, created_by=alice)
    return Trace.objects.create(team=agent.team, conversation=conversation, agent=agent, user=alice,
                                cost_usd=Decimal("0.25"), event_seq=3, meta={"a": 1})


def test_the_row_comes_back_as_written_in_one_statement(trace):
    with work_counted() as work:
        row = update_returning(Trace, {"pk": trace.pk, "status": trace.status},
                               {"cost_usd": F("cost_usd") + Decimal("0.0000000001"),
                                "event_seq": F("event_seq") + 2, "meta": {"b": [2]}},
                               ["event_seq", "cost_usd", "meta", "conversation_id"])
    assert work.queries == 1
    assert row == {"event_seq": 5, "cost_usd": Decimal("0.2500000001"), "meta": {"b": [2]},
                   "conversation_id": trace.conversation_id}
    trace.refresh_from_db()
    assert (trace.event_seq, trace.cost_usd, trace.meta) == (5, Decimal("0.2500000001"), {"b": [2]})


def test_nothing_matched_is_none_and_nothing_is_written(trace):
    assert update_returning(Trace, {"pk": trace.pk, "status": "finished-long-ago"},
                            {"event_seq": F("event_seq") + 1}, ["event_seq"]) is None
    assert Trace.objects.get(pk=trace.pk).event_seq == 3


def test_more_than_one_row_is_refused(trace):
    Trace.objects.create(team=trace.team, conversation=trace.conversation, agent=trace.agent, user=trace.user)
    with pytest.raises(ValueError, match="updated 2 rows"):
        update_returning(Trace, {"conversation": trace.conversation}, {"event_seq": 9}, ["event_seq"])
    with pytest.raises(ValueError, match="updated 2 rows"):  # by its id, as a kept shape runs it
        update_returning(Trace, {"conversation_id": trace.conversation_id}, {"event_seq": 9}, ["event_seq"])


orm_compiled = returning._compiled


def _owned_update(trace, *, attempts, cost, seq, answer, finished):
    return update_returning(
        Trace, {"pk": trace.pk, "status": Trace.Status.RUNNING, "attempts": attempts},
        {"cost_usd": F("cost_usd") + cost, "event_seq": F("event_seq") + seq, "answer": answer,
         "finished_at": finished},
        ["event_seq", "cost_usd", "answer", "finished_at"])


def test_a_shape_compiled_once_writes_and_reads_each_calls_values_as_the_orm_does(trace, monkeypatch):
    """The first call of a shape is the ORM's; the later ones adapt their own values into its
    SQL, and what they write and read back is what the ORM writes and reads."""
    Trace.objects.filter(pk=trace.pk).update(status=Trace.Status.RUNNING, attempts=2)
    compiled = []
    monkeypatch.setattr(returning, "_compiled", lambda *args, **kw: compiled.append(args) or orm_compiled(*args, **kw))
    later = timezone.now()
    calls = [(Decimal("0.5"), 1, "first", None), (Decimal("0.0000000003"), 2, "it's \"quoted\" %s", later),
             (Decimal("1"), 3, "", later)]
    expected_seq, expected_cost = 3, Decimal("0.25")
    for cost, seq, answer, finished in calls:
        with work_counted() as work:
            row = _owned_update(trace, attempts=2, cost=cost, seq=seq, answer=answer, finished=finished)
        expected_seq, expected_cost = expected_seq + seq, expected_cost + cost
        assert work.queries == 1
        assert row == {"event_seq": expected_seq, "cost_usd": expected_cost, "answer": answer,
                       "finished_at": finished}
        stored = Trace.objects.get(pk=trace.pk)
        assert (stored.event_seq, stored.cost_usd, stored.answer, stored.finished_at) == (
            expected_seq, expected_cost, answer, finished)
    # Another attempt's values match no row, through the same kept SQL.
    assert _owned_update(trace, attempts=1, cost=Decimal("1"), seq=1, answer="x", finished=None) is None
    assert Trace.objects.get(pk=trace.pk).event_seq == expected_seq
    # Two shapes (finished_at NULL, and set), each compiled by the ORM once per process.
    assert len(compiled) <= 2


def test_an_expression_or_an_instance_is_compiled_by_the_orm_at_every_call(trace, alice):
    for _ in range(2):
        row = update_returning(Trace, {"pk": trace.pk, "user": alice},
                               {"cancel_requested_at": Coalesce(F("cancel_requested_at"), Value(timezone.now())),
                                "event_seq": F("event_seq") * 1 + 1}, ["event_seq", "cancel_requested_at"])
        assert row is not None and row["cancel_requested_at"] is not None
    assert Trace.objects.get(pk=trace.pk).event_seq == 5


@pytest.fixture
def insert_compiles(monkeypatch) -> list:
    """The models whose inserts ``returning`` compiles from now on, one entry per compile."""
    compiles = []

    class Counted(returning.InsertQuery):
        def get_compiler(self, *args, **kwargs):
            compiles.append(self.model)
            return super().get_compiler(*args, **kwargs)

    monkeypatch.setattr(returning, "InsertQuery", Counted)
    return compiles


def test_a_new_row_is_stored_as_the_orms_create_stores_it_compiled_once(trace, insert_compiles):
    compiles = insert_compiles
    made = []
    for text in ("first", "it's \"quoted\" %s", "third"):
        with work_counted() as work:
            message = returning.create(Message, conversation=trace.conversation, role=Message.Role.USER,
                                       blocks=[{"type": "text", "text": text}], text=text, trace=trace,
                                       usage={"input_tokens": len(text)})
        assert work.queries == 1
        assert message.pk is not None and not message._state.adding and message._state.db == "default"
        made.append(message)
    # Compiled once (none if an earlier test kept this set of columns already).
    assert len(compiles) <= 1
    by_orm = Message.objects.create(conversation=trace.conversation, role=Message.Role.USER,
                                    blocks=[{"type": "text", "text": "orm"}], text="orm", trace=trace)
    stored = {m.pk: m for m in Message.objects.filter(pk__in=[m.pk for m in [*made, by_orm]])}
    for message in made:
        again = stored[message.pk]
        assert (again.uuid, again.text, again.blocks, again.usage, again.created_at, again.trace_id) == (
            message.uuid, message.text, message.blocks, message.usage, message.created_at, trace.pk)
        assert again.created_at is not None and again.uuid != by_orm.uuid
    assert [m.pk for m in made] == sorted(m.pk for m in made) and made[-1].pk < by_orm.pk


def test_a_model_with_save_receivers_is_saved_by_the_orm(trace):
    heard = []

    def receiver(sender, instance, created, **kwargs):
        heard.append((instance.pk, created))

    signals.post_save.connect(receiver, sender=Conversation, dispatch_uid="test-insert-receiver")
    try:
        conversation = returning.create(Conversation, team=trace.team, agent=trace.agent, created_by=trace.user)
    finally:
        signals.post_save.disconnect(dispatch_uid="test-insert-receiver", sender=Conversation)
    assert heard == [(conversation.pk, True)]


def test_saving_some_fields_writes_only_those_and_a_missing_row_is_an_error(trace):
    Trace.objects.filter(pk=trace.pk).update(error="written by another")
    trace.answer, trace.meta, trace.event_seq = "written", {"kept": True}, 11
    with work_counted() as work:
        returning.save_fields(trace, ["answer", "meta", "event_seq"])
    assert work.queries == 1
    stored = Trace.objects.get(pk=trace.pk)
    assert (stored.answer, stored.meta, stored.event_seq, stored.error) == (
        "written", {"kept": True}, 11, "written by another")
    Trace.objects.filter(pk=trace.pk).delete()
    with pytest.raises(DatabaseError, match="did not affect any rows"):
        returning.save_fields(trace, ["answer"])


def test_a_value_given_as_an_expression_is_inserted_by_the_orm(trace):
    message = returning.create(Message, conversation=trace.conversation, role=Message.Role.USER,
                               text=Value("from an expression"), blocks=[])
    assert Message.objects.get(pk=message.pk).text == "from an expression"


def test_an_upsert_stores_a_new_row_or_replaces_the_conflicting_ones_columns_compiled_once(trace, insert_compiles):
    compiles = insert_compiles
    step = Step.objects.create(trace=trace, seq=1, kind=Step.Kind.LLM_REQUEST, started_at=timezone.now())
    other = Step.objects.create(trace=trace, seq=2, kind=Step.Kind.LLM_REQUEST, started_at=timezone.now())
    StepPayload.objects.create(step=other, kind="response", content="another step's", content_type="text/plain", size=14)
    for content in ("first", "it's \"quoted\" %s", "{\"json\": true}"):
        with work_counted() as work:
            returning.upsert(StepPayload(step=step, kind="response", content=content, content_type="text/plain",
                                         size=len(content)), unique=("step", "kind"), update=("content", "size"))
        assert work.queries == 1
        assert StepPayload.objects.filter(step=step).values_list("kind", "content", "size").get() == (
            "response", content, len(content))
    returning.upsert(StepPayload(step=step, kind="request", content="a second kind", content_type="x", size=1),
                     unique=("step", "kind"), update=("content", "size"))
    assert sorted(StepPayload.objects.filter(step=step).values_list("kind", "content")) == [
        ("request", "a second kind"), ("response", "{\"json\": true}")]
    # The other step's row is untouched; the statement was compiled once for its columns (none if
    # an earlier test kept them already).
    assert StepPayload.objects.get(step=other).content == "another step's"
    assert len(compiles) <= 1
    kept = [kept for (_, model, _, conflict), kept in returning._kept_inserts.items()
            if model is StepPayload and conflict == (("step", "kind"), ("content", "size"))]
    assert len(kept) == 1 and kept[0] is not None  # run from the kept statement, not by the ORM


def test_columns_left_at_their_default_and_columns_given_a_value_are_stored_alike(trace):
    """A column at its field's constant default reuses the default adapted once; any other value
    (the same as the default but another object, or a different one) is adapted at each insert."""
    base = {"team": trace.team, "conversation": trace.conversation, "agent": trace.agent, "user": trace.user}
    defaults = returning.create(Trace, **base)
    again = returning.create(Trace, **base)  # from the kept statement
    given = returning.create(Trace, **base, event_seq=7, cost_usd=Decimal("1.5"), provider_name="a provider",
                             input_tokens=int("0"), status=Trace.Status.RUNNING)
    by_orm = Trace.objects.create(**base, event_seq=7, cost_usd=Decimal("1.5"), provider_name="a provider",
                                  status=Trace.Status.RUNNING)
    columns = ("event_seq", "cost_usd", "provider_name", "input_tokens", "status", "answer", "meta")
    stored = {row["pk"]: row for row in Trace.objects.filter(
        pk__in=[defaults.pk, again.pk, given.pk, by_orm.pk]).values("pk", *columns)}
    plain = Trace.objects.filter(pk=Trace.objects.create(**base).pk).values(*columns).get()
    assert {k: stored[defaults.pk][k] for k in columns} == {k: stored[again.pk][k] for k in columns} == plain
    assert {k: stored[given.pk][k] for k in columns} == {k: stored[by_orm.pk][k] for k in columns}
    assert stored[given.pk]["cost_usd"] == Decimal("1.5") and stored[given.pk]["event_seq"] == 7
