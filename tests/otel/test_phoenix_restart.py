"""A real Arize Phoenix stopped in the middle of a turn and started again: every span of the
turn arrives once, with its parent (``traces.export.delivery``). The test runs a Phoenix of its
own (the suite's is shared), on one port and one store across the restart."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents.chat.services import conversation_create
from agents.turns.approvals import approval_decide
from agents.turns.services import turn_start
from tests import cached_server
from tests.approvals import waiting_approval
from tests.members import member_of
from tests.otel import phoenix, phoenix_client
from tests.otel.scenario import export_to_loopback
from traces.export import delivery, pipeline
from traces.models import PendingExport, TraceExporter

pytestmark = pytest.mark.django_db(transaction=True)


class OwnPhoenix:
    """A Phoenix that the test stops and starts again at will, keeping its port and store."""

    def __init__(self, executable: Path, store: Path) -> None:
        self.executable, self.store = executable, store
        self.port = cached_server.free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.running: contextlib.ExitStack | None = None

    def start(self) -> None:
        self.running = contextlib.ExitStack()
        self.running.enter_context(phoenix.serving(self.executable, self.port, store=self.store))

    def stop(self) -> None:
        if self.running is not None:
            self.running.close()
            self.running = None


@pytest.fixture
def own_phoenix(phoenix_url, tmp_path) -> Iterator[OwnPhoenix]:
    server = OwnPhoenix(phoenix.prepare(), tmp_path)  # installed already: the suite's runs
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_phoenix_stopped_in_the_middle_of_a_turn_gets_every_span_once_when_back(
        own_phoenix, settings, team_a, make_agent, alice, sent_turns, use_redis, run_in_thread):
    export_to_loopback(settings)
    settings.OTEL_EXPORT_TIMEOUT_S = 1.0
    project = f"agentsite-restart-{uuid.uuid4().hex[:8]}"
    TraceExporter.objects.create(team=team_a, endpoint=own_phoenix.url, service_name=project)
    agent = make_agent(name="Careful", approval=("calculator",))
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation),
                       text="What is 6 * 7 and what time is it in UTC?")
    worker = run_in_thread(trace.pk)
    step = waiting_approval(trace, what="the calculator waiting for approval")
    early = phoenix_client.wait_for_spans(own_phoenix.url, project, trace.uuid.hex, count=1)
    assert "chat demo" in [s["name"] for s in early]

    own_phoenix.stop()  # while the turn waits for a person
    approval_decide(trace=trace, call_id=step.call_id, approved=True, membership=member_of(alice, trace))
    worker.join(timeout=30)
    assert worker.result == "completed"
    pipeline.PIPELINE.flush(15.0)
    pending = PendingExport.objects.get(trace=trace)  # the rest is owed, the first step is not
    assert pending.sent_steps and delivery.TURN_SPAN not in pending.sent_steps

    own_phoenix.start()
    assert delivery.catch_up(timezone.now() + timedelta(hours=1))["delivered"] == 1
    spans = phoenix_client.wait_for_spans(own_phoenix.url, project, trace.uuid.hex, count=6)
    assert sorted(s["name"] for s in spans) == [
        "await_approval calculator", "chat demo", "chat demo", "execute_tool calculator",
        "execute_tool current_time", "invoke_agent Careful", ]
    ids = [s["span_id"] for s in spans]
    assert len(ids) == len(set(ids))
    root = next(s for s in spans if s["name"] == "invoke_agent Careful")
    assert root["parent_id"] is None
    assert all(s["parent_id"] == root["span_id"] for s in spans if s is not root)
    assert not PendingExport.objects.filter(trace=trace).exists()
