"""The inspector's tree: iterations, their requests, approval waits as their own spans, calls that
ran at the same time marked parallel, retries nested under the request they retried."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from traces.export.config import ExportConfig
from traces.export.spans import Turn, step_spans
from traces.models import Step, Trace
from traces.record.presentation import turn_tree


def step(trace, seq, kind, name, iteration, offset, duration, **fields):
    return Step.objects.create(trace=trace, seq=seq, kind=kind, name=name, iteration=iteration, offset_ms=offset,
                               duration_ms=duration, status=fields.pop("status", "ok"),
                               started_at=timezone.now(), **fields)


def make(conversation, alice):
    trace = Trace.objects.create(team=conversation.team, conversation=conversation, agent=conversation.agent,
                                 user=alice, status="completed", duration_ms=9000)
    step(trace, 1, "llm_request", "demo", 1, 0, 300)
    step(trace, 2, "approval", "deploy", 1, 300, 5000, call_id="c1")
    step(trace, 3, "tool_call", "deploy", 1, 300, 200, call_id="c1", meta={"approval_wait_ms": 5000})
    step(trace, 4, "retry", "rate limited", 2, 5600, 500)
    step(trace, 5, "llm_request", "demo", 2, 6100, 400)
    step(trace, 6, "tool_call", "fetch", 2, 6500, 1000, call_id="c2")
    step(trace, 7, "tool_call", "calculator", 2, 6600, 300, call_id="c3")
    step(trace, 8, "tool_call", "current_time", 2, 7600, 100, call_id="c4")
    return trace


def test_the_tree_nests_iterations_marks_parallel_calls_and_approval_waits(conversation, alice):
    trace = make(conversation, alice)
    rows = turn_tree(trace, list(trace.steps.order_by("seq")))
    labels = [(r["depth"], r["label"]) for r in rows]
    assert labels[0] == (0, "Helper") and (1, "Iteration 1") in labels and (1, "Iteration 2") in labels
    by_seq = {r.get("seq"): r for r in rows if r.get("seq")}
    assert by_seq[2]["label"] == "waiting for approval: deploy" and by_seq[2]["depth"] == 2
    # the approved call is drawn from when it ran, after the 5 s wait
    assert by_seq[3]["bar_x"] == round(5300 / 9000 * 100, 3)
    assert by_seq[4]["depth"] == 3  # the retry, nested
    assert by_seq[6]["parallel"] and by_seq[7]["parallel"] and not by_seq[8]["parallel"]
    assert not by_seq[3]["parallel"]


def test_an_approved_call_recorded_before_or_after_its_start_left_out_the_wait_reads_the_same(
        conversation, alice):
    """Recorded now: the call starts at the decision (``approval_waited_ms`` says how long it
    waited). Recorded before: it kept its start before the wait, as ``approval_wait_ms``. The
    tree and the exported span put both at the decision."""
    trace = make(conversation, alice)
    old = trace.steps.get(seq=3)
    new = step(trace, 9, "tool_call", "deploy", 1, 5300, 200, call_id="c1",
               meta={"approval_waited_ms": 5000})
    new.started_at = old.started_at + timedelta(milliseconds=5000)
    new.save()
    by_seq = {r.get("seq"): r for r in turn_tree(trace, list(trace.steps.order_by("seq"))) if r.get("seq")}
    assert by_seq[9]["bar_x"] == by_seq[3]["bar_x"] == round(5300 / 9000 * 100, 3)
    turn = Turn(trace, ExportConfig(endpoint="http://127.0.0.1:4318/v1/traces"))
    [old_span], [new_span] = step_spans(turn, old, payloads={}), step_spans(turn, new, payloads={})
    assert old_span.start_time == new_span.start_time and old_span.end_time == new_span.end_time
    assert new_span.attributes["agentsite.tool.approval_wait_ms"] == 5000


def test_the_tree_page_is_escaped_and_team_scoped(client_for, alice, charlie, conversation):
    trace = make(conversation, alice)
    Step.objects.filter(trace=trace, seq=6).update(name="<img src=x onerror=alert(1)>")
    response = client_for(alice).get(reverse("trace_tree", args=[trace.uuid]), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and html.count('role="treeitem"') == 11
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img src=x" not in html
    assert html.count("parallel-flag") == 2
    assert client_for(charlie).get(reverse("trace_tree", args=[trace.uuid])).status_code == 404
    assert client_for(charlie).get(reverse("trace_tree", args=[trace.uuid]),
                                   HTTP_HX_REQUEST="true").status_code == 404


def test_the_tree_opened_on_its_own_lands_on_the_trace_page_at_the_tree(client_for, alice, conversation):
    # A fragment of the trace page: opened from a link or reloaded, it was an unstyled piece.
    trace = make(conversation, alice)
    response = client_for(alice).get(reverse("trace_tree", args=[trace.uuid]))
    assert response.status_code == 302
    assert response.url == reverse("trace_detail", args=[trace.uuid]) + "#turn-tree"
