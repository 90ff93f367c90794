"""``Prepared``: a read compiled once and run with new values gives what the ORM gives for
those values, in one statement, on any thread."""

from __future__ import annotations

import threading
import uuid
from datetime import date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from agents.models import Conversation, Message
from agentsite.db.prepared import Prepared
from tests.helpers import work_counted
from traces.models import Trace

pytestmark = pytest.mark.django_db(transaction=True)


def _traces_with_last_answer(conversation_id: int, event_seq_at_least: int) -> QuerySet[Trace]:
    last = (Message.objects.filter(trace_id=OuterRef("pk"), role=Message.Role.ASSISTANT)
            .order_by("-id").values("text")[:1])
    return (Trace.objects.select_related("conversation", "agent")
            .annotate(last_answer=Subquery(last))
            .filter(conversation_id=conversation_id, event_seq__gte=event_seq_at_least)
            .order_by("pk"))


@pytest.fixture
def conversations(make_agent, alice):
    agent = make_agent(name="Prepared")
    made = []
    for count in (2, 3):
        conversation = Conversation.objects.create(team=agent.team, agent=agent, created_by=alice,
                                                   title=f"c{count}")
        for seq in range(count):
            trace = Trace.objects.create(team=agent.team, conversation=conversation, agent=agent,
                                         user=alice, event_seq=seq, cost_usd=Decimal("0.5") * seq)
            Message.objects.create(conversation=conversation, trace=trace, role=Message.Role.ASSISTANT,
                                   text=f"answer {conversation.pk}/{seq}")
        made.append(conversation)
    return made


def _as_compared(traces):
    return [(t.pk, t.event_seq, t.cost_usd, t.last_answer, t.conversation.title, t.agent.name)
            for t in traces]


def test_each_call_reads_what_the_orm_reads_for_its_values_in_one_statement(conversations):
    read = Prepared(_traces_with_last_answer)
    for conversation in conversations:
        for at_least in (0, 1, 5):
            expected = _as_compared(_traces_with_last_answer(conversation.pk, at_least))
            with work_counted() as work:
                got = read(conversation.pk, at_least)
                compared = _as_compared(got)  # the related objects came with the row
            assert compared == expected
            assert work.queries == 1
    assert expected == [] and any(_as_compared(read(c.pk, 0)) for c in conversations)


def test_values_rows_flat_lists_and_aggregates_come_back_as_the_orm_makes_them(conversations):
    first = conversations[0]
    flat = Prepared(lambda conversation_id: Trace.objects.filter(conversation_id=conversation_id)
                    .order_by("-pk").values_list("pk", flat=True))
    assert flat(first.pk) == list(Trace.objects.filter(conversation=first).order_by("-pk").values_list("pk", flat=True))
    counted = Prepared(lambda at_least: Conversation.objects.filter(pk__in=[c.pk for c in conversations])
                       .annotate(n=Count("traces", filter=Q(traces__event_seq__gte=at_least)))
                       .order_by("pk").values("title", "n"))
    assert counted(1) == [{"title": "c2", "n": 1}, {"title": "c3", "n": 2}]
    assert counted(0) == [{"title": "c2", "n": 2}, {"title": "c3", "n": 3}]


def test_get_and_first_behave_as_the_querysets(conversations):
    by_pk = Prepared(lambda pk: Conversation.objects.filter(pk=pk))
    assert by_pk.get(conversations[1].pk).title == "c3"
    assert by_pk.first(conversations[0].pk).title == "c2"
    assert by_pk.first(0) is None
    with pytest.raises(Conversation.DoesNotExist):
        by_pk.get(0)
    both = Prepared(lambda team_id: Conversation.objects.filter(team_id=team_id))
    with pytest.raises(Conversation.MultipleObjectsReturned):
        both.get(conversations[0].team_id)


def test_a_value_the_sql_inlines_or_branches_on_is_refused_at_compile():
    sliced = Prepared(lambda n: Conversation.objects.all()[:n])
    with pytest.raises(ImproperlyConfigured, match="its SQL changes with its values"):
        sliced(3)
    branching = Prepared(lambda pk: Conversation.objects.filter(pk=pk, **({"shared": True} if pk % 2 else {})))
    with pytest.raises(ImproperlyConfigured, match="its SQL changes with its values"):
        branching(3)
    by_pk = Prepared(lambda pk: Conversation.objects.filter(pk=pk))
    with pytest.raises(TypeError, match="takes 1 value"):
        by_pk(1, 2)
    with pytest.raises(TypeError, match="is str, not int"):
        by_pk("1 OR 1=1")


def test_threads_share_the_compiled_read_each_on_its_own_connection(conversations):
    read = Prepared(_traces_with_last_answer)
    read(conversations[0].pk, 0)  # compiled on this thread's connection
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def run(conversation):
        try:
            results[conversation.pk] = _as_compared(read(conversation.pk, 0))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(c,)) for c in conversations]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for conversation in conversations:
        assert results[conversation.pk] == _as_compared(_traces_with_last_answer(conversation.pk, 0))


def test_each_shape_is_compiled_once_and_read_as_the_orm_reads_it(conversations):
    builds = []

    def newest(conversation_id: int, *, at_most: int | None) -> QuerySet[Trace]:
        builds.append(at_most)
        rows = Trace.objects.filter(conversation_id=conversation_id).order_by("-pk")
        return rows[:at_most] if at_most is not None else rows

    read = Prepared(newest)
    third = conversations[1]
    for _ in range(2):
        for at_most in (1, 2, None):
            expected = list(Trace.objects.filter(conversation=third).order_by("-pk"))[:at_most]
            assert read(third.pk, at_most=at_most) == expected
    assert builds == [1, 1, 2, 2, None, None]  # each shape built twice, once: the check of its SQL
    assert read(conversations[0].pk, at_most=1) == [Trace.objects.filter(conversation=conversations[0]).latest("pk")]
    assert builds == [1, 1, 2, 2, None, None]


def _by_public_id(team_id: int, owner_id: int, conversation_uuid: uuid.UUID, since: date, *,
                  everyone: bool) -> QuerySet[Conversation]:
    rows = Conversation.objects.filter(team_id=team_id, uuid=conversation_uuid, created_at__date__gte=since)
    return rows if everyone else rows.filter(created_by_id=owner_id)


def test_uuids_and_dates_are_adapted_as_the_orm_adapts_them_and_a_shape_may_leave_a_value_out(conversations, alice):
    read = Prepared(_by_public_id)
    first = conversations[0]
    today = first.created_at.date()
    for everyone in (True, False):
        for since, owner, expected in ((today, alice.pk, [first]), (today + timedelta(days=1), alice.pk, []),
                                       (today, 0, [] if not everyone else [first])):
            assert read(first.team_id, owner, first.uuid, since, everyone=everyone) == expected
    assert read(first.team_id, alice.pk, uuid.uuid4(), today, everyone=True) == []
    with pytest.raises(TypeError, match="is str, not UUID"):
        read(first.team_id, alice.pk, str(first.uuid), today, everyone=True)
    with pytest.raises(TypeError, match="is datetime, not date"):
        read(first.team_id, alice.pk, first.uuid, first.created_at, everyone=True)


def _updated_after(conversation_id: int, after: datetime) -> QuerySet[Conversation]:
    return Conversation.objects.filter(pk=conversation_id, updated_at__gt=after).values_list("pk", flat=True)


def test_aware_datetimes_are_adapted_as_the_orm_adapts_them(conversations):
    read = Prepared(_updated_after)
    first = conversations[0]
    at = first.updated_at
    for after, expected in ((at - timedelta(microseconds=1), [first.pk]), (at, []),
                            (at.astimezone(timezone.get_fixed_timezone(-300)) - timedelta(seconds=1),
                             [first.pk])):
        assert read(first.pk, after) == list(_updated_after(first.pk, after)) == expected
    with pytest.raises(TypeError, match="is date, not datetime"):
        read(first.pk, at.date())


def _titled(conversation_id: int, title: str) -> QuerySet[Conversation]:
    return Conversation.objects.filter(pk=conversation_id, title=title).values_list("title", flat=True)


def test_text_is_matched_exactly_and_a_lookup_that_rewrites_it_is_refused(conversations):
    read = Prepared(_titled)
    first = conversations[0]
    assert read(first.pk, "c2") == ["c2"]
    # Text the SQL would treat specially stays a value: no wildcard, no quote breaks out.
    for hostile in ("c%", "c_", "c2' OR '1'='1", "\x1fprepared-standin-a-1"):
        assert read(first.pk, hostile) == []
    with pytest.raises(TypeError, match="is int, not str"):
        read(first.pk, 2)
    def containing(conversation_id: int, text: str) -> QuerySet[Conversation]:
        return Conversation.objects.filter(pk=conversation_id, title__icontains=text)

    with pytest.raises(ImproperlyConfigured, match="does not reach the SQL as it is"):
        Prepared(containing)(first.pk, "c")


def test_the_sql_for_a_raw_statement_is_the_orms_with_the_calls_values(conversations):
    read = Prepared(_titled)
    first, second = conversations
    for conversation in (first, second):
        sql, params = read.sql(conversation.pk, conversation.title)
        expected_sql, expected_params = _titled(conversation.pk, conversation.title).query.sql_with_params()
        assert (sql, list(params)) == (expected_sql, list(expected_params))
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            assert cursor.fetchall() == [(conversation.title,)]
