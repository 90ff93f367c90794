"""The cancellation audit (``traces.debug.audit``) of turns whose real worker process was killed.

``test_audit.py`` ends a turn through the reaper while its worker thread still runs in the test
process; here the Celery worker running the turn gets SIGKILL in the middle of a step, as a
worker that runs out of memory does, and another worker's reaper finds it dead. The audit must
then say the reaper stopped the turn and name the exact worker that died, list the step that was
cut (a tool call waiting on a slow API, a model reply half streamed) and show that nothing ran
after the stop.
With resumption on, the other worker finishes the turn instead and there is nothing to audit.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.utils import timezone

from agents.chat.services import conversation_create
from agents.models import Tool
from agents.runtime.providers.demo import LONG_ANSWER
from agents.turns.reaper import INTERRUPTED_MESSAGE
from agents.turns.services import turn_start
from tests.agents.turns.test_workers import alive_rows
from tests.helpers import wait_for
from tests.members import member_of
from traces.debug.audit import trace_audit
from traces.models import Step, Trace
from traces.record.services import STEP_INTERRUPTED

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LOOKUP_TOOL = "slow_lookup"


# -- a fake of the slow external API a team's HTTP tool calls ---------------------------------------
@dataclass
class FakeSlowApi:
    """Holds the first request it gets until the test ends, as an API that hangs; answers
    later ones at once. ``hung`` is set when the first one arrives."""

    url: str = ""
    requests: list[float] = field(default_factory=list)
    hung: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def fake_api() -> Iterator[FakeSlowApi]:
    api = FakeSlowApi()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            with lock:
                api.requests.append(time.time())
                first = len(api.requests) == 1
            if first:
                api.hung.set()
                api.release.wait(60)
            raw = json.dumps({"value": 42}).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the worker that asked is gone

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        api.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def worker_env(monkeypatch):
    """The environment ``start_worker``'s processes inherit: loopback allowed for the slow API,
    and beats fast enough that a killed worker counts as dead after 1.5 s. ``worker_env(n)``
    sets how many times a turn may be resumed (the reaper's ``TURN_MAX_RESUMES``)."""
    monkeypatch.setenv("OUTBOUND_ALLOWED_NETWORKS", "127.0.0.1/32")
    monkeypatch.setenv("TURN_WORKER_BEAT_S", "0.25")
    monkeypatch.setenv("TURN_WORKER_DEAD_AFTER_S", "1.5")
    monkeypatch.setenv("TURN_REAPER_INTERVAL_S", "0.5")

    def set_resumes(resumes: int) -> None:
        monkeypatch.setenv("TURN_MAX_RESUMES", str(resumes))

    return set_resumes


def lookup_agent(make_agent, api: FakeSlowApi):
    """An agent whose only tool is an HTTP tool that calls the slow API; "call the slow_lookup
    tool 1 times" makes the demo model call it."""
    agent = make_agent(name="Looker", tools=())
    agent.tools.add(Tool.objects.create(
        team=agent.team, name=LOOKUP_TOOL, kind=Tool.Kind.HTTP, http_method="GET", timeout_s=60,
        description="Looks a key up (slowly).", parameters={"type": "object", "properties": {}},
        url_template=f"{api.url}/lookup"))
    return agent


def name_of(process) -> str:
    return f"{process.node} pid {process.pid}"


def start(agent, alice, text: str) -> Trace:
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    return turn_start(conversation=conversation, membership=member_of(alice, conversation), text=text)


def claimed_by(trace: Trace, process) -> bool:
    return Trace.objects.filter(pk=trace.pk, status="running", worker=name_of(process)).exists()


def fresh(trace: Trace) -> Trace:
    return Trace.objects.select_related("agent").get(pk=trace.pk)


def killed_mid_steps(victim, reaper, in_tool: Trace, in_stream: Trace, api: FakeSlowApi) -> datetime:
    """Wait until the victim runs both turns inside their steps (the tool waiting on the API,
    the reply's first text saved) while the other worker beats, then SIGKILL the victim; the
    moment of the kill."""
    wait_for(lambda: len(alive_rows(victim, reaper)) == 2, timeout=10, what="both workers' rows")
    assert api.hung.wait(15), "the tool never called the API"
    wait_for(lambda: Step.objects.filter(trace=in_stream, kind="llm_request", status="running",
                                         payloads__kind="partial").exists(),
             timeout=10, what="the streamed text saved")
    assert claimed_by(in_tool, victim) and claimed_by(in_stream, victim)
    killed = timezone.now()
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=5)
    return killed


def assert_stopped_by_the_reaper(audit: dict, trace: Trace, dead: str, killed: datetime) -> None:
    stop = audit["stop"]
    assert (audit["status"], audit["status_label"]) == ("interrupted", "Interrupted")
    assert (stop["kind"], stop["worker"]) == ("worker_lost", dead)
    assert stop["by"] == f"the reaper: worker {dead} stopped running the turn"
    assert (stop["error"], stop["reason"]) == (INTERRUPTED_MESSAGE, "")
    # nobody asked for the stop: the reaper ended the turn after the kill, once the worker
    # had missed its beats
    assert stop["requested_at"] is None and stop["took_ms"] is None and stop["limit_at"] is None
    assert stop["stopped_at"] == trace.finished_at.isoformat() and trace.finished_at > killed
    assert stop["last_heartbeat_at"] == trace.heartbeat_at.isoformat() and trace.heartbeat_at < killed
    after = audit["after_stop"]
    assert (after["ran"], after["evidence"]) == (False, [])
    assert after["checked"] and after["last_heartbeat_at"] == stop["last_heartbeat_at"]
    assert audit["approvals"] == []


def test_a_killed_workers_turns_end_interrupted_with_the_cut_call_and_stream_audited(
        make_agent, alice, start_worker, worker_env, fake_api):
    """One worker runs two turns, one waiting on a slow tool, one streaming a reply; it gets
    SIGKILL, and the other worker's reaper ends both (no resumption)."""
    worker_env(0)
    looker = lookup_agent(make_agent, fake_api)
    storyteller = make_agent(name="Storyteller",
                             provider_options={"first_token_latency_s": 0.05, "token_delay_s": 0.1})
    victim = start_worker()
    in_tool = start(looker, alice, f"call the {LOOKUP_TOOL} tool 1 times")
    in_stream = start(storyteller, alice, "Tell me a story")
    wait_for(lambda: claimed_by(in_tool, victim) and claimed_by(in_stream, victim), timeout=10,
             what="both turns claimed by the first worker")
    reaper = start_worker()  # after the claims: it takes no part in the turns
    dead = name_of(victim)

    killed = killed_mid_steps(victim, reaper, in_tool, in_stream, fake_api)

    wait_for(lambda: Trace.objects.filter(pk__in=[in_tool.pk, in_stream.pk], status="interrupted").count() == 2,
             timeout=15, what="both turns interrupted")
    print(f"\nkill -> both turns interrupted: {(timezone.now() - killed).total_seconds():.2f} s")

    # mid-tool: the call is abandoned without a result
    trace = fresh(in_tool)
    assert (trace.attempts, trace.worker) == (1, dead)  # never handed to the other worker
    audit = trace_audit(trace)
    assert_stopped_by_the_reaper(audit, trace, dead, killed)
    tool = trace.steps.get(kind="tool_call")
    assert audit["tools"] == [{
        "seq": tool.seq, "name": LOOKUP_TOOL, "call_id": tool.call_id, "ran_ms": None,
        "started_at": tool.started_at.isoformat(), "ended_at": None, "after_stop_ms": None,
        "state": "abandoned", "detail": "Abandoned while running: no result was recorded."}]
    assert tool.error == STEP_INTERRUPTED
    # the answer that asked for the call had come in whole: no request was in flight
    assert audit["requests"] == [] and audit["cut_count"] == 1
    # The dead worker had not yet stored the answer with the call, so the history holds no
    # call without a result: the reaper had nothing to answer for it.
    assert list(trace.messages.values_list("role", flat=True)) == ["user"]
    assert audit["synthetic"] == []
    assert len(fake_api.requests) == 1  # nothing called the API again

    # mid-stream: the request in flight, with the text saved while it streamed
    trace = fresh(in_stream)
    assert (trace.attempts, trace.worker) == (1, dead)
    audit = trace_audit(trace)
    assert_stopped_by_the_reaper(audit, trace, dead, killed)
    llm = trace.steps.get(kind="llm_request")
    [request] = audit["requests"]
    assert (request["seq"], request["state"], request["error"]) == (llm.seq, "cut", STEP_INTERRUPTED)
    assert (request["provider"], request["model"]) == ("Demo for Storyteller", "demo")
    partial = llm.payloads.get(kind="partial").content
    assert request["text_source"] == "partial" and request["text"] == partial
    assert request["text"] and LONG_ANSWER.startswith(request["text"])  # cut before its end
    assert request["text_chars"] == len(partial) < len(LONG_ANSWER) and not request["truncated"]
    # its tokens are estimated (the input from the runtime's estimate at its start, the output
    # counted from the streamed text) and recorded on the step, so its cost is counted too
    assert request["estimated"] is True and llm.meta["usage_estimated"] is True
    assert llm.input_tokens == llm.meta["estimated_input_tokens"] > 0
    assert 0 < llm.output_tokens < len(partial)
    assert request["usage"]["input_tokens"] == llm.input_tokens
    assert request["usage"]["output_tokens"] == llm.output_tokens
    assert request["tokens"] == llm.input_tokens + llm.output_tokens
    assert trace.total_tokens >= request["tokens"]  # the trace's totals include it
    assert request["ran_ms"] is None and request["restarts"] == []  # the moment of the cut is unknown
    assert audit["tools"] == [] and audit["synthetic"] == [] and audit["cut_count"] == 1


def test_with_resumption_on_the_other_worker_finishes_the_turn_and_there_is_no_audit(
        make_agent, alice, start_worker, worker_env, fake_api):
    worker_env(1)
    victim = start_worker()
    trace = start(lookup_agent(make_agent, fake_api), alice, f"call the {LOOKUP_TOOL} tool 1 times")
    wait_for(lambda: claimed_by(trace, victim), timeout=10, what="the turn claimed by the first worker")
    other = start_worker()
    wait_for(lambda: len(alive_rows(victim, other)) == 2, timeout=10, what="both workers' rows")
    assert fake_api.hung.wait(15), "the tool never called the API"

    killed = timezone.now()
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=5)

    wait_for(lambda: Trace.objects.filter(pk=trace.pk, status__in=["completed", "failed", "interrupted"]).exists(),
             timeout=20, what="the resumed turn to end")
    print(f"\nkill -> resumed turn completed: {(timezone.now() - killed).total_seconds():.2f} s")
    trace = fresh(trace)
    assert trace.status == "completed"
    assert (trace.attempts, trace.worker) == (2, name_of(other))
    assert trace.meta["resume"]["from_worker"] == name_of(victim)
    assert len(fake_api.requests) == 2  # the GET ran again on the other worker, and answered
    assert trace_audit(trace) is None
