"""Credentials in what a tool returns never reach the database, a live frame or a log line:
a real turn whose memory_recall tool returns the whole corpus (``secret_corpus``)."""

from __future__ import annotations

import json
import logging

import pytest

from agents.chat.live import chat_payload
from agents.models import Message
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from agentsite.logging import ScrubSecretsFilter
from memory.models import MemoryEntry
from tests.agents.runtime.secret_corpus import SECRETS
from tests.helpers import drain, listen
from tests.members import member_of
from traces.models import Step, StepPayload, Trace, TrajectoryState
from traces.record.live import inspector_payload

pytestmark = pytest.mark.django_db(transaction=True)


def _fragments() -> dict[str, list[str]]:
    out = {}
    for label, secret, _ in SECRETS:
        body = secret.replace("\n", "")
        out[label] = [body[i:i + 12] for i in range(0, max(len(body) - 12, 0) + 1, 6)]
    return out


def _leaks(text: str) -> list[str]:
    return [label for label, parts in _fragments().items() if any(p in text for p in parts)]


def test_a_turn_whose_tool_returns_secrets_stores_and_broadcasts_none(make_agent, alice, sent_turns,
                                                                       use_redis, caplog):
    from agents.chat.services import conversation_create

    agent = make_agent(name="Ops", tools=("memory_recall",))
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    for index, (label, secret, context) in enumerate(SECRETS):
        MemoryEntry.objects.create(team=agent.team, agent=agent, scope=MemoryEntry.Scope.AGENT,
                                   key=f"deploy note {index:02d}",
                                   content=f"deploy note {index:02d} ({label}): {context.format(s=secret)}")
    agent.memory_recall_limit = 20
    agent.save()

    caplog.set_level(logging.DEBUG)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is my deploy note?")
    channel = listen(trace.group_name)
    assert turn_run(trace.pk) == "completed"

    tool_steps = Step.objects.filter(trace=trace, kind="tool_call")
    assert tool_steps.exists() and all(s.name == "memory_recall" for s in tool_steps)
    output = StepPayload.objects.get(step__in=tool_steps, kind="output").content
    assert output.count("deploy note") >= 10 and output.count("[REDACTED") >= 10  # text kept, secrets masked

    stored = [output]
    stored += [p.content for p in StepPayload.objects.filter(step__trace=trace)]
    stored += [json.dumps(s.meta) + (s.error or "") + (s.name or "") for s in Step.objects.filter(trace=trace)]
    stored += [json.dumps(m.blocks) + m.text for m in Message.objects.filter(conversation=conversation)]
    stored += [json.dumps(st, default=str) for st in TrajectoryState.objects.filter(trace=trace).values()]
    row = Trace.objects.filter(pk=trace.pk).values().get()
    stored.append(json.dumps(row, default=str))
    assert _leaks("\n".join(stored)) == []

    announced = drain(channel)
    frames = json.dumps(announced)
    # What an open inspector and chat receive: the events with their fragments rendered.
    rendered = json.dumps([inspector_payload(e) for e in announced] + [chat_payload(e) for e in announced])
    assert "memory_recall" in rendered and _leaks(frames) == [] and _leaks(rendered) == []

    log_filter = ScrubSecretsFilter()
    for record in caplog.records:
        log_filter.filter(record)
        assert _leaks(record.getMessage()) == []


def test_the_log_filter_scrubs_messages_arguments_and_one_time_tokens():
    record = logging.LogRecord("django.server", logging.INFO, __file__, 1,
                               '"GET %s HTTP/1.1" 200 %s', ("/invite/Qm9gWkX3vVq0Jx7yTPr2c5bN/?next=/&token=abc123def456", 512), None)
    ScrubSecretsFilter().filter(record)
    message = record.getMessage()
    assert "Qm9gWkX3vVq0Jx7y" not in message and "abc123def456" not in message
    assert message == '"GET /invite/[REDACTED]/?next=/&token=[REDACTED] HTTP/1.1" 200 512'
    for _label, secret, context in SECRETS:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed: %s", (context.format(s=secret),), None)
        ScrubSecretsFilter().filter(record)
        assert _leaks(record.getMessage()) == []


def test_every_configured_log_handler_scrubs(settings):
    handlers = settings.LOGGING["handlers"]
    assert handlers and all("scrub_secrets" in h.get("filters", []) for h in handlers.values())
