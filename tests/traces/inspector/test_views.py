from __future__ import annotations

import json
from decimal import Decimal

from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agents.models import Conversation
from tests.members import member_of
from traces.models import Step, StepPayload, Trace


def test_inspector_renders_steps_states_and_totals(client_for, alice, sample_trace):
    page = client_for(alice).get(reverse("trace_detail", args=[sample_trace.uuid]))
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('class="step k-') == 12
    assert 'id="state-6"' in html and "After iteration 6" in html
    assert "calculator" in html and "Why this model" in html
    assert f'data-seq="{sample_trace.event_seq}"' in html
    # Payloads are not in the page: they load on demand.
    assert "xxxxxxxxxx" not in html


def test_payloads_load_on_demand_and_download(client_for, alice, sample_trace):
    c = client_for(alice)
    fragment = c.get(reverse("step_detail", args=[sample_trace.uuid, 1]))
    assert fragment.status_code == 200
    assert b"Request" in fragment.content and b"Response" in fragment.content and b"<html" not in fragment.content
    download = c.get(reverse("step_payload_download", args=[sample_trace.uuid, 2, "output"]))
    assert download.status_code == 200 and "attachment" in download["Content-Disposition"]
    assert json.loads(download.content)["kind"] == "output"


def test_export_has_skeleton_and_payloads(client_for, alice, sample_trace):
    response = client_for(alice).get(reverse("trace_export", args=[sample_trace.uuid]))
    data = json.loads(b"".join(response.streaming_content))
    assert data["uuid"] == str(sample_trace.uuid) and len(data["steps"]) == 12
    assert set(data["steps"][0]["payloads"]) == {"request", "response"}
    assert len(data["trajectory_states"]) == 6


def test_export_writes_money_as_plain_decimals(client_for, alice, sample_trace):
    Trace.objects.filter(pk=sample_trace.pk).update(cost_usd=Decimal("0E-10"))
    Step.objects.filter(trace=sample_trace, seq=1).update(cost_usd=Decimal("0.0005970000"))
    response = client_for(alice).get(reverse("trace_export", args=[sample_trace.uuid]))
    data = json.loads(b"".join(response.streaming_content))
    assert data["cost_usd"] == "0"
    assert data["steps"][0]["cost_usd"] == "0.000597"
    assert all("E" not in (s["cost_usd"] or "") for s in data["steps"])


def test_changes_since_returns_only_newer_events(client_for, alice, sample_trace):
    data = client_for(alice).get(reverse("trace_changes", args=[sample_trace.uuid]) + "?since=10").json()
    steps = [e for e in data["events"] if e["event"] == "step"]
    assert [e["step"] for e in steps] == [11, 12]
    assert data["seq"] == sample_trace.event_seq
    assert all(e["seq"] > 10 for e in data["events"] if e["event"] != "trace")


def test_charlie_gets_404_everywhere(client_for, charlie, sample_trace):
    c = client_for(charlie)
    for name, args in [
        ("trace_detail", [sample_trace.uuid]),
        ("trace_changes", [sample_trace.uuid]),
        ("trace_steps_chunk", [sample_trace.uuid]),
        ("step_detail", [sample_trace.uuid, 1]),
        ("trace_states_chunk", [sample_trace.uuid]),
        ("step_payload_download", [sample_trace.uuid, 1, "request"]),
        ("trace_export", [sample_trace.uuid]),
    ]:
        assert c.get(reverse(name, args=args)).status_code == 404, name
    assert b"Generated question" not in c.get(reverse("traces")).content


def test_list_filters_and_pagination(client_for, alice, conversation, sample_trace):
    from traces.sample import make_sample_trace

    other = make_sample_trace(conversation=conversation, user=alice, steps=2)
    Trace.objects.filter(pk=other.pk).update(status="failed", model="gpt-4o", cost_usd="0.5")
    c = client_for(alice)
    page = c.get(reverse("traces")).content.decode()
    assert page.count('class="pill status-') == 2
    failed = c.get(reverse("traces") + "?status=failed").content.decode()
    assert failed.count('class="pill status-') == 1 and "gpt-4o" in failed
    costly = c.get(reverse("traces") + "?min_cost=0.3").content.decode()
    assert costly.count('class="pill status-') == 1 and "gpt-4o" in costly  # the sample costs $0.12
    bad = c.get(reverse("traces") + "?min_cost=abc&date_from=yesterday")
    assert bad.status_code == 200 and b"Use a number" in bad.content and b"Use a date" in bad.content


def _budgets(team, user) -> None:
    from traces.models import Budget

    Budget.objects.create(team=team, period="month", limit_usd=Decimal("5"))
    Budget.objects.create(team=team, user=user, period="day", limit_usd=Decimal("1"))


def test_the_list_reads_each_kind_of_row_once_however_many_traces(
        client_for, alice, bob, conversation, make_agent, django_assert_max_num_queries):
    """Who is asking (the session; the person with their teams); how many traces match, the
    filter menus (agents, people, models), the budgets with their spend, the page of traces with
    their agents, people and messages: 8 for a page of 25 from 30 traces of 3 agents and 2
    people, so a read per row would show."""
    from agents.chat.services import conversation_create
    from traces.models import Feedback
    from traces.sample import make_sample_trace

    agents = [conversation.agent, make_agent(name="Writer"), make_agent(name="Triage")]
    for n in range(30):
        person = (alice, bob)[n % 2]
        chat = conversation_create(agent=agents[n % 3], membership=member_of(person, conversation.team))
        trace = make_sample_trace(conversation=chat, user=person, steps=2)
        Trace.objects.filter(pk=trace.pk).update(agent=agents[n % 3], model=f"model-{n % 4}")
        if n % 5 == 0:
            Feedback.objects.create(team=conversation.team, trace=trace, user=alice, rating=Feedback.Rating.UP)
    _budgets(conversation.team, alice)
    c = client_for(alice)
    c.get(reverse("traces"))  # the first page after signing in keeps the active team in the session
    with django_assert_max_num_queries(8):
        response = c.get(reverse("traces"))
    html = response.content.decode()
    assert len(response.context["traces"]) == 25 and "Page 1 of 2 · 30 traces" in html
    assert response.context["choices"]["models"] == [f"model-{n}" for n in range(4)]

    # Without filters the list is read with compiled reads (``ListedTraces``): the same pages,
    # counts and rows as the ORM's query, for an admin (every trace) and for a member (their own
    # and the shared ones).
    from traces.record.selectors import ListedTraces, TraceFilters, trace_list

    for who in (alice, bob):
        membership = member_of(who, conversation.team)
        listed, orm = ListedTraces(membership), trace_list(membership=membership, filters=TraceFilters())
        assert listed.count() == orm.count() > 0
        for start, stop in ((0, 25), (25, 50), (10, 12), (0, 0)):
            assert [t.pk for t in listed[start:stop]] == [t.pk for t in orm[start:stop]]
        assert [t.user_message.text for t in listed[0:5]] == [t.user_message.text for t in orm[0:5]]
    second = c.get(reverse("traces") + "?page=2")
    assert len(second.context["traces"]) == 5 and "Page 2 of 2 · 30 traces" in second.content.decode()


def test_the_inspector_reads_each_kind_of_row_once_however_long_the_trace(
        client_for, alice, bob, conversation, django_assert_max_num_queries):
    """Who is asking (the session; the person with their teams); the trace with its agent,
    conversation, people, message and key; its first chunk of steps, its latest states with the
    one before them, its ratings, the budgets with their spend, the prices its requests used,
    the fallbacks a failover used, its forks: 10 for 60 steps, 30 states and 2 ratings, so a read
    per step or state would show."""
    from traces.models import Feedback
    from traces.sample import make_sample_trace

    trace = make_sample_trace(conversation=conversation, user=alice, steps=60)
    for person, rating in ((alice, Feedback.Rating.UP), (bob, Feedback.Rating.DOWN)):
        Feedback.objects.create(team=conversation.team, trace=trace, user=person, rating=rating)
    _budgets(conversation.team, alice)
    c = client_for(alice)
    url = reverse("trace_detail", args=[trace.uuid])
    c.get(url)  # the first page after signing in keeps the active team in the session
    with django_assert_max_num_queries(10):
        html = c.get(url).content.decode()
    assert html.count('class="step k-') == 60 and html.count('class="state"') == 20
    assert "Show earlier iterations" in html and html.count('class="rating-mark') == 2


def test_the_inspector_does_not_look_for_failovers_forks_or_ratings_a_trace_does_not_have(
        client_for, alice, conversation, django_assert_max_num_queries):
    """The trace's own query says whether there are any (``Exists``): the session, the person,
    the trace, its steps, its states, the budgets, the prices its requests used."""
    from traces.sample import make_sample_trace

    trace = make_sample_trace(conversation=conversation, user=alice, steps=20)
    Step.objects.filter(trace=trace, kind=Step.Kind.RETRY).delete()
    c = client_for(alice)
    url = reverse("trace_detail", args=[trace.uuid])
    c.get(url)
    with django_assert_max_num_queries(7) as ran:
        assert c.get(url).status_code == 200
    assert not [q for q in ran.captured_queries
                if 'FROM "traces_feedback"' in q["sql"] and "EXISTS" not in q["sql"]]


def test_inspector_names_the_fallbacks_a_failover_used(client_for, alice, sample_trace):
    from django.utils import timezone

    from traces.models import Step

    Step.objects.create(trace=sample_trace, seq=13, kind="retry", name="Primary · gpt-4o", status="error",
                        started_at=timezone.now(), meta={"failover": True, "next_provider": "Backup", "next_model": "demo"})
    Step.objects.create(trace=sample_trace, seq=14, kind="retry", name="Primary · gpt-4o", status="error",
                        started_at=timezone.now(), meta={"failover": False, "attempt": 1})
    Trace.objects.filter(pk=sample_trace.pk).update(step_count=14, routing={"fallbacks": [{"provider": "Backup", "model": "demo"}]})
    html = client_for(alice).get(reverse("trace_detail", args=[sample_trace.uuid])).content.decode()
    assert "Fallbacks used" in html and "Backup / demo" in html


def test_a_waiting_approval_is_decided_from_the_inspector(client_for, alice, vera, sample_trace):
    Trace.objects.filter(pk=sample_trace.pk).update(status="running")
    Step.objects.filter(trace=sample_trace, seq=3).update(kind="approval", status="waiting", call_id="toolu_9",
                                                         name="deploy", meta={"timeout_s": 300})
    url = reverse("approval_decision", args=[sample_trace.uuid, "toolu_9"])
    html = client_for(alice).get(reverse("trace_detail", args=[sample_trace.uuid])).content.decode()
    assert html.count(f'hx-post="{url}"') == 2 and "waits for approval. No decision within 300 s" in html
    # the row is the same for every reader (it also goes out live); who may act is the page's
    # body (viewers: no can-chat class) and the server's check
    Conversation.objects.filter(pk=sample_trace.conversation_id).update(shared=True)
    viewer = client_for(vera).get(reverse("trace_detail", args=[sample_trace.uuid]))
    assert viewer.status_code == 200 and 'class="can-chat"' not in viewer.content.decode()
    assert f'hx-post="{url}"' in viewer.content.decode()
    assert client_for(vera).post(url, {"approved": "1"}).status_code == 403
    Step.objects.filter(trace=sample_trace, seq=3).update(status="ok")
    done = client_for(alice).get(reverse("trace_detail", args=[sample_trace.uuid])).content.decode()
    assert f'hx-post="{url}"' not in done


def test_a_request_and_its_response_read_as_a_conversation(client_for, alice, sample_trace):
    step = Step.objects.get(trace=sample_trace, seq=1)
    request = {"model": "m", "system": [{"text": "Be brief.", "cacheable": True}], "tools": ["calculator"],
               "message_offset": 0, "tool_specs": [{"name": "calculator", "description": "Does sums",
                                                    "parameters": {"type": "object"}}],
               "messages": [{"role": "user", "blocks": [{"type": "text", "text": "<script>x</script> 2+2?"}]},
                            {"role": "assistant", "blocks": [{"type": "tool_use", "id": "c1", "name": "calculator",
                                                              "input": {"expression": "2+2"}}]},
                            {"role": "tool", "blocks": [{"type": "tool_result", "tool_use_id": "c1",
                                                         "name": "calculator", "output": "4", "is_error": False}]}]}
    step.payloads.filter(kind="request").update(content=json.dumps(request), content_type="application/json")
    html = client_for(alice).get(reverse("step_detail", args=[sample_trace.uuid, 1])).content.decode()
    assert '<div class="turn-part role-system"><div class="role-label">System</div><div class="part-text">Be brief.</div>' in html
    assert "&lt;script&gt;x&lt;/script&gt; 2+2?" in html and "<script>x" not in html
    assert 'calls</span> <code class="tool-name">calculator</code>' in html and "&quot;expression&quot;: &quot;2+2&quot;" in html
    assert 'result of</span> <code class="tool-name">calculator</code><pre class="tool-pre">4</pre>' in html
    assert "Tools offered (1)" in html and "Raw JSON" in html


def test_the_text_streamed_so_far_is_on_the_page_and_at_its_own_url(client_for, alice, charlie, sample_trace):
    Trace.objects.filter(pk=sample_trace.pk).update(status="running")
    step = Step.objects.get(trace=sample_trace, seq=1)
    Step.objects.filter(pk=step.pk).update(status="running", kind="llm_request")
    StepPayload.objects.create(step=step, kind="partial", content="Once upon a <time>", content_type="text/plain")
    url = reverse("trace_partial", args=[sample_trace.uuid])
    c = client_for(alice)
    assert c.get(url + "?step=1").json() == {"step": 1, "text": "Once upon a <time>", "running": True}
    assert c.get(url + "?step=x").status_code == 400 and c.get(url + "?step=99").status_code == 404
    assert client_for(charlie).get(url + "?step=1").status_code == 404
    page = c.get(reverse("trace_detail", args=[sample_trace.uuid])).content.decode()
    assert 'data-step="1" data-chars="18"' in page and "Once upon a &lt;time&gt;" in page
    chat = c.get(reverse("conversation", args=[sample_trace.conversation.uuid])).content.decode()
    assert '<div class="stream-text" data-step="1" data-seq="1" data-chars="18">Once upon a &lt;time&gt;</div>' in chat


def test_a_finished_traces_timeline_is_kept_rendered_and_shown_afresh_when_it_changes(
        client_for, alice, bob, conversation):
    """A finished trace's timeline and trajectory are rendered once (``steps_key``) and then not
    even read; a
    re-pricing (its cost) renders it again, a running trace's never is kept, and a reader who
    may not see the trace does not get the kept copy."""
    from traces.sample import make_sample_trace

    trace = make_sample_trace(conversation=conversation, user=alice, steps=30)
    c = client_for(alice)
    url = reverse("trace_detail", args=[trace.uuid])
    c.get(url)  # the first page after signing in keeps the active team in the session
    cache.clear()
    with CaptureQueriesContext(connection) as rendered:
        first = c.get(url).content.decode()
    with CaptureQueriesContext(connection) as kept:
        again = c.get(url).content.decode()
    still = [q["sql"] for q in kept.captured_queries]
    timeline = [q["sql"] for q in rendered.captured_queries if q["sql"] not in still
                and 'FROM "traces_step"' in q["sql"] and "DISTINCT" not in q["sql"]]
    # The header's price sources too (a re-pricing moves the trace's cost, and the key).
    assert not [q for q in still if q.startswith('SELECT DISTINCT "traces_step"')]
    assert [q for q in rendered.captured_queries if q["sql"].startswith('SELECT DISTINCT "traces_step"')]
    assert again.count('class="step k-') == 30 and len(timeline) == 1 and "LIMIT 200" in timeline[0]
    assert again[again.index('<ol id="steps"'):] == first[first.index('<ol id="steps"'):]
    # Its trajectory too: read for the first page, kept with the timeline after it.
    states = [q["sql"] for q in rendered.captured_queries if 'FROM "traces_trajectorystate"' in q["sql"]]
    assert len(states) == 1 and not [q for q in still if 'FROM "traces_trajectorystate"' in q]
    assert again.count('class="state"') == first.count('class="state"') > 0

    step = trace.steps.filter(kind=Step.Kind.LLM_REQUEST).order_by("seq").first()
    Step.objects.filter(pk=step.pk).update(cost_usd=Decimal("7.25"))
    Trace.objects.filter(pk=trace.pk).update(cost_usd=Decimal("7.25"))
    html = c.get(url).content.decode()
    row = html[html.index(f'id="step-{step.seq}"'):]
    assert "$7.25" in row[:row.index("</li>")]

    Trace.objects.filter(pk=trace.pk).update(status=Trace.Status.RUNNING)
    Step.objects.filter(pk=step.pk).update(name="renamed-while-running")
    with CaptureQueriesContext(connection) as running:
        assert "renamed-while-running" in c.get(url).content.decode()
    assert [q for q in running.captured_queries if 'FROM "traces_trajectorystate"' in q["sql"]]
    Conversation.objects.filter(pk=conversation.pk).update(shared=False)
    assert client_for(bob).get(url).status_code == 404


def test_a_finished_traces_row_in_the_list_is_kept_and_shown_afresh_when_it_changes(
        client_for, alice, conversation, sample_trace):
    """The list keeps a finished trace's row rendered (``agentsite.fragments``); a re-pricing
    or a renamed agent renders it again."""
    from agents.models import Agent

    c = client_for(alice)

    def row() -> str:
        html = c.get(reverse("traces")).content.decode()
        start = html.index("<tbody>")
        return html[start:html.index("</tbody>")]

    first = row()
    Trace.objects.filter(pk=sample_trace.pk).update(cost_usd=Decimal("3.75"))
    repriced = row()
    assert "$3.75" in repriced and "$3.75" not in first
    Agent.objects.filter(pk=sample_trace.agent_id).update(name="Renamed helper")
    assert "Renamed helper" in row()
