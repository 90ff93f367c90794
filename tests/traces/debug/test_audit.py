"""The cancellation audit (``traces.debug.audit``): what a stop cut, from real turns run in this
process on the offline demo model — Stop mid-stream, Stop during a slow tool, Stop while an approval
waits, a time limit, a worker that died — shown in the inspector, the REST API and the export."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from agents.chat.services import conversation_create
from agents.models import Message
from agents.turns.reaper import trace_reap
from agents.turns.services import turn_cancel, turn_start
from agents.turns.tasks import turn_run
from tests.agents.api.rest_keys import key_client
from tests.agents.turns.conftest import SlowTool, slow_tool_agent  # noqa: F401 - a fixture
from tests.helpers import wait_for
from tests.members import member_of
from traces.debug.audit import APPROVAL_WITHDRAWN_REASON, CUT_PREFIXES, trace_audit
from traces.models import Step, Trace
from traces.record import live, services, step_values
from traces.sample import make_sample_trace

pytestmark = pytest.mark.django_db(transaction=True)


def status_of(trace: Trace) -> str:
    return Trace.objects.values_list("status", flat=True).get(pk=trace.pk)


def fresh(trace: Trace) -> Trace:
    return Trace.objects.select_related("agent").get(pk=trace.pk)


def stopped_mid_stream(make_agent, alice, run_in_thread) -> Trace:
    """A story streamed slowly, stopped by alice after about a second."""
    agent = make_agent(name="Storyteller", provider_options={"first_token_latency_s": 0.05, "token_delay_s": 0.1})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Tell me a story")
    worker = run_in_thread(trace.pk)
    wait_for(lambda: Step.objects.filter(trace=trace, kind="llm_request", status="running").exists())
    time.sleep(1.0)  # past the first save of the streamed text
    turn_cancel(trace=trace, membership=member_of(alice, trace))
    wait_for(lambda: status_of(trace) == "cancelled", timeout=3)
    worker.join(timeout=5)
    return fresh(trace)


def stopped_in_slow_tool(slow: SlowTool, alice, run_in_thread) -> Trace:
    conversation = conversation_create(agent=slow.agent, membership=member_of(alice, slow.agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the slow_tool tool 1 times")
    worker = run_in_thread(trace.pk)
    assert slow.started.wait(10)
    turn_cancel(trace=trace, membership=member_of(alice, trace))
    wait_for(lambda: status_of(trace) == "cancelled", timeout=3)
    worker.join(timeout=5)
    return fresh(trace)


# -- Stop mid-stream ------------------------------------------------------------------------------
def test_a_stop_mid_stream_lists_the_streamed_text_and_its_estimated_tokens(
        make_agent, alice, sent_turns, use_redis, run_in_thread):
    trace = stopped_mid_stream(make_agent, alice, run_in_thread)

    audit = trace_audit(trace)

    stop = audit["stop"]
    assert (audit["status"], stop["kind"], stop["by"]) == ("cancelled", "cancelled", "alice")
    assert stop["requested_at"] == trace.cancel_requested_at.isoformat()
    assert 0 <= stop["took_ms"] < 1000
    [request] = audit["requests"]
    llm = trace.steps.get(kind="llm_request")
    assert request["seq"] == llm.seq and request["error"] == "cancelled"
    kept = Message.objects.get(trace=trace, role="assistant")
    assert kept.outcome == "interrupted"
    # the text the model had streamed, as the conversation kept it
    assert request["text"] and request["text"].strip() == kept.text.strip()
    assert request["text_chars"] == len(request["text"]) and not request["truncated"]
    assert request["estimated"] is True
    assert request["usage"]["output_tokens"] == llm.output_tokens > 0
    assert request["usage"]["input_tokens"] == llm.input_tokens > 0
    assert request["cost_usd"] == "0"  # the demo model is free
    assert audit["tools"] == [] and audit["approvals"] == [] and audit["synthetic"] == []
    assert audit["after_stop"]["ran"] is False and audit["after_stop"]["checked"]


# -- Stop during a slow tool -----------------------------------------------------------------------
def test_a_stop_during_a_slow_tool_lists_it_abandoned_with_its_synthetic_result(
        slow_tool_agent, alice, sent_turns, use_redis, run_in_thread):  # noqa: F811
    trace = stopped_in_slow_tool(slow_tool_agent, alice, run_in_thread)

    audit = trace_audit(trace)

    tool = trace.steps.get(kind="tool_call")
    [row] = audit["tools"]
    assert (row["seq"], row["name"], row["state"]) == (tool.seq, "slow_tool", "abandoned")
    assert "synthetic result (cancelled)" in row["detail"]
    [synthetic] = audit["synthetic"]
    assert synthetic == {"call_id": tool.call_id, "name": "slow_tool", "output": "Cancelled by user.",
                         "label": "cancelled", "seq": tool.seq, "in_history": True}
    # the answer that asked for the tool was complete: no request was in flight
    assert audit["requests"] == []
    assert audit["after_stop"]["ran"] is False
    assert slow_tool_agent.stopped.is_set()  # the tool itself was stopped


def test_a_tool_that_ran_on_to_its_result_after_the_stop_is_evidence(
        slow_tool_agent, alice, sent_turns, use_redis, run_in_thread):  # noqa: F811
    trace = stopped_in_slow_tool(slow_tool_agent, alice, run_in_thread)
    # As a tool that ignores cancellation leaves it: a real result, 2 s after the stop.
    tool = trace.steps.get(kind="tool_call")
    late = (trace.cancel_requested_at - tool.started_at).total_seconds() * 1000 + 2000
    Step.objects.filter(pk=tool.pk).update(status="ok", success=True, error="", duration_ms=late)
    tool.payloads.filter(kind="output").update(content="done")

    audit = trace_audit(fresh(trace))

    [row] = audit["tools"]
    assert row["state"] == "finished_after" and 1900 < row["after_stop_ms"] < 2100
    assert audit["after_stop"]["ran"] is True
    texts = [e["text"] for e in audit["after_stop"]["evidence"]]
    assert any("slow_tool" in t and "after the turn was stopped" in t for t in texts), texts


def test_calls_the_model_asked_for_that_never_ran_are_listed(
        slow_tool_agent, alice, sent_turns, use_redis, run_in_thread):  # noqa: F811
    trace = stopped_in_slow_tool(slow_tool_agent, alice, run_in_thread)
    # The answer asked for a second call; the stop came before it had a step.
    llm = trace.steps.get(kind="llm_request")
    payload = llm.payloads.get(kind="message")
    message = json.loads(payload.content)
    message["blocks"].append({"type": "tool_use", "id": "call_later", "name": "calculator",
                              "input": {"expression": "1+1"}})
    payload.content = json.dumps(message)
    payload.save()

    audit = trace_audit(fresh(trace))

    never = [t for t in audit["tools"] if t["state"] == "never_started"]
    assert [(t["name"], t["call_id"], t["asked_in"]) for t in never] == [("calculator", "call_later", llm.seq)]


# -- Stop while an approval waits ------------------------------------------------------------------
def test_a_stop_while_an_approval_waits_lists_it_withdrawn(make_agent, alice, sent_turns, use_redis, run_in_thread):
    agent = make_agent(name="Careful", approval=("calculator",))
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")
    worker = run_in_thread(trace.pk)
    wait_for(lambda: Step.objects.filter(trace=trace, kind="approval", status="waiting").exists())
    turn_cancel(trace=trace, membership=member_of(alice, trace))
    wait_for(lambda: status_of(trace) == "cancelled", timeout=3)
    worker.join(timeout=5)

    audit = trace_audit(fresh(trace))

    approval = trace.steps.get(kind="approval")
    [row] = audit["approvals"]
    assert (row["seq"], row["name"]) == (approval.seq, "calculator")
    assert row["detail"] == step_values.APPROVAL_ERRORS["cancelled"]
    assert [s["name"] for s in audit["synthetic"]] == ["calculator"]


# -- a time limit ------------------------------------------------------------------------------------
def test_a_time_limit_names_the_limit_and_the_call_it_cut(make_agent, alice, sent_turns, use_redis, client_for):
    # the first model request takes 3 s, so the limit of 1 s always lands inside it
    agent = make_agent(name="Slowpoke", turn_time_limit_s=1, max_tool_iterations=50,
                       provider_options={"request_latency_s": 3.0})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 30 times")
    assert turn_run(trace.pk) == "timed_out"
    trace = fresh(trace)

    audit = trace_audit(trace)

    stop = audit["stop"]
    assert (stop["kind"], stop["by"], stop["timed_out"]) == ("time_limit", "the agent's time limit of 1 s", True)
    # the moment the limit stopped the turn is stored: one second in, before the turn ended
    limit = trace.cancel_requested_at
    assert stop["requested_at"] == limit.isoformat() and stop["limit_at"] is None
    assert timedelta(seconds=1) <= limit - trace.started_at < timedelta(seconds=3)
    assert limit <= trace.finished_at
    assert stop["took_ms"] == round((trace.finished_at - limit).total_seconds() * 1000)
    panel = client_for(alice).get(f"/traces/{trace.uuid}/").content.decode()
    assert "Time limit reached" in panel and "after the limit stopped it" in panel
    assert "Stop asked for" not in panel and "Time limit due" not in panel
    # what the limit cut: the model request or the call running at that moment, never both
    # missing, and each call left open answered in the conversation
    cut = trace.steps.get(kind="llm_request")
    assert [r["seq"] for r in audit["requests"]] == [cut.seq]
    for row in audit["tools"]:
        assert row["state"] in ("abandoned", "never_started")
    open_calls = {t["call_id"] for t in audit["tools"] if t["state"] == "abandoned"}
    assert open_calls <= {s["call_id"] for s in audit["synthetic"] if s["in_history"]}
    assert audit["after_stop"]["ran"] is False


# -- a worker that died ------------------------------------------------------------------------------
def test_a_worker_that_died_mid_tool_ends_interrupted_with_the_call_abandoned(
        slow_tool_agent, alice, sent_turns, use_redis, run_in_thread, settings):  # noqa: F811
    settings.TURN_MAX_RESUMES = 0  # the reaper ends the turn instead of resuming it
    conversation = conversation_create(agent=slow_tool_agent.agent, membership=member_of(alice, slow_tool_agent.agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the slow_tool tool 1 times")
    worker = run_in_thread(trace.pk)
    assert slow_tool_agent.started.wait(10)
    # The worker falls silent: the reaper finds its heartbeat stale and ends the turn.
    assert trace_reap(stale_after_s=-1).interrupted == [trace.pk]
    worker.join(timeout=15)
    trace = fresh(trace)

    audit = trace_audit(trace)

    stop = audit["stop"]
    assert (audit["status"], stop["kind"]) == ("interrupted", "worker_lost")
    assert stop["by"].startswith("the reaper: worker ") and stop["requested_at"] is None
    assert stop["last_heartbeat_at"] == trace.heartbeat_at.isoformat()
    tool = trace.steps.get(kind="tool_call")
    [row] = audit["tools"]
    assert (row["seq"], row["state"]) == (tool.seq, "abandoned")
    assert row["detail"] == "Abandoned while running: no result was recorded."
    # the late worker wrote nothing after the reaper ended the turn
    assert worker.result == "lost"
    assert audit["after_stop"]["ran"] is False


def test_a_request_cut_by_a_dead_worker_keeps_the_text_it_saved(
        make_agent, alice, sent_turns, use_redis, run_in_thread, settings):
    settings.TURN_MAX_RESUMES = 0
    agent = make_agent(name="Storyteller", provider_options={"first_token_latency_s": 0.05, "token_delay_s": 0.1})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Tell me a story")
    worker = run_in_thread(trace.pk)
    wait_for(lambda: Step.objects.filter(trace=trace, kind="llm_request", payloads__kind="partial").exists())
    assert trace_reap(stale_after_s=-1).interrupted == [trace.pk]
    worker.join(timeout=15)

    audit = trace_audit(fresh(trace))

    [request] = audit["requests"]
    assert request["text_source"] == "partial" and request["text"]
    assert request["error"] == services.STEP_INTERRUPTED


def test_what_the_audit_matches_is_what_the_services_write():
    assert services.STEP_INTERRUPTED.startswith(CUT_PREFIXES[0])
    assert APPROVAL_WITHDRAWN_REASON in step_values.APPROVAL_ERRORS


# -- where it shows -------------------------------------------------------------------------------------
def test_the_inspector_shows_the_audit_escaped_and_only_to_the_team(
        make_agent, alice, charlie, sent_turns, use_redis, run_in_thread, client_for, sample_trace):
    trace = stopped_mid_stream(make_agent, alice, run_in_thread)
    Message.objects.filter(trace=trace, role="assistant").update(text="x")
    llm = trace.steps.get(kind="llm_request")
    llm.payloads.filter(kind="response").update(content=json.dumps({"partial_text": "<script>alert(1)</script>"}))
    llm.payloads.filter(kind="partial").update(content="<script>alert(1)</script>")

    page = client_for(alice).get(f"/traces/{trace.uuid}/")

    html = page.content.decode()
    assert page.status_code == 200 and 'id="stop-audit"' in html
    assert "What the stop cut" in html and "Nothing ran after the stop." in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert f'href="#step-{llm.seq}"' in html
    # a completed turn has no audit; another team's trace is a 404
    assert 'id="stop-audit"' not in client_for(alice).get(f"/traces/{sample_trace.uuid}/").content.decode()
    assert client_for(charlie).get(f"/traces/{trace.uuid}/").status_code == 404
    # it is part of the header the inspector receives live when the turn ends
    live_header = live.trace_payload(services.trace_for_live(trace.pk))["html"]
    assert 'id="stop-audit"' in live_header and "Nothing ran after the stop." in live_header
    assert 'id="stop-audit"' not in live.trace_payload(services.trace_for_live(sample_trace.pk))["html"]


def test_the_api_and_the_export_carry_the_audit(make_agent, alice, charlie, team_a, team_b, sent_turns,
                                                use_redis, run_in_thread, sample_trace, client_for):
    trace = stopped_mid_stream(make_agent, alice, run_in_thread)
    client = key_client(alice, team_a, ["traces:read"])

    body = client.get(f"/api/v1/traces/{trace.uuid}").json()
    assert body["audit"]["stop"]["by"] == "alice" and body["audit"]["requests"][0]["estimated"] is True
    assert client.get(f"/api/v1/traces/{sample_trace.uuid}").json()["audit"] is None
    assert key_client(charlie, team_b, ["traces:read"]).get(f"/api/v1/traces/{trace.uuid}").status_code == 404

    export = json.loads(b"".join(client_for(alice).get(f"/traces/{trace.uuid}/export.json").streaming_content))
    assert export["audit"]["requests"][0]["seq"] == body["audit"]["requests"][0]["seq"]


def test_the_audit_of_a_long_trace_reads_its_end_in_a_few_queries(conversation, alice, django_assert_max_num_queries):
    trace = make_sample_trace(conversation=conversation, user=alice, steps=2000)
    Trace.objects.filter(pk=trace.pk).update(status="cancelled", cancel_reason="Cancelled by alice",
                                             cancel_requested_at=trace.finished_at)
    trace = fresh(trace)

    with django_assert_max_num_queries(4):
        audit = trace_audit(trace)

    assert audit["stop"]["by"] == "alice"
