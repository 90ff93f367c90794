"""Fixtures of the API's tests."""

from __future__ import annotations

import pytest

from agentsite.celery import app


@pytest.fixture
def turns_run(monkeypatch, run_in_thread, use_redis) -> list[int]:
    """Every turn task sent runs at once in a thread of this process, as a worker thread would
    run it (no broker), with a real Redis for its announcements and signals (a request waiting
    for an answer waits for the turn's end signal); the trace ids, in the order they were sent."""
    started: list[int] = []

    def send_task(name, args=None, kwargs=None, **options):
        started.append(args[0])
        run_in_thread(args[0])

    monkeypatch.setattr(app, "send_task", send_task)
    monkeypatch.setattr(app.conf, "broker_url", "memory://")
    return started
