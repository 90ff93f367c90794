"""Fixtures of the turns' tests: a Redis of the test's own that it stops and restarts, and an
agent with a tool that takes its time."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import threading
from dataclasses import dataclass, field

import pytest
import redis

from agents.turns.lifecycle import TURN_TASK
from agentsite.processes import EmbeddedRedis, Printer, free_port
from tests.conftest import point_at_redis, set_celery_broker


class Broker:
    """A Redis of the test's own on a fixed port, which the test stops and starts again (the
    embedded server keeps nothing, like a restart in production), with the Celery app, the
    channel layer and the signals pointed at it."""

    def __init__(self, settings, workdir) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.server: EmbeddedRedis | None = None
        self._log = open(workdir / "redis.log", "w")  # noqa: SIM115 - closed in close()
        point_at_redis(settings, self.url)

    def start(self) -> None:
        self.server = EmbeddedRedis(port=self.port, data_dir=self.workdir / "redis")
        self.server.start(Printer(self._log, color=False))
        self.server.wait_ready()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=5)
            self.server = None

    def kill(self) -> None:
        """Redis dies at once, as in a crash."""
        if self.server is not None:
            self.server.signal_group(signal.SIGKILL)
            self.server.wait(timeout=5)
            self.server = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def turn_tasks(self) -> list[int]:
        """The trace ids of the turn tasks waiting in the ``turns`` queue (what else waits
        there, a test's stand-in for another task, is left out)."""
        ids = []
        for raw in self.client().lrange("turns", 0, -1):
            if not raw.startswith(b"{"):
                continue
            message = json.loads(raw)
            assert message["headers"]["task"] == TURN_TASK
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            ids.append(args[0])
        return ids

    def close(self) -> None:
        self.stop()
        self._log.close()


@pytest.fixture
def broker(settings, tmp_path):
    """``Broker`` on a free port, not started (so: down, connections refused)."""
    from agentsite.celery import app

    previous = app.conf.broker_url
    broker = Broker(settings, tmp_path)
    yield broker
    broker.close()
    set_celery_broker(previous)


@dataclass
class SlowTool:
    """The ``slow_tool`` built-in of ``slow_tool_agent``: it sleeps 30 s; ``started`` is set
    when it begins, ``stopped`` when it ends (cancelled or not)."""

    started: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    agent: object = None

    async def run(self, arguments):
        self.started.set()
        try:
            await asyncio.sleep(30)
        finally:
            self.stopped.set()
        return "done"


@pytest.fixture
def slow_tool_agent(monkeypatch, make_agent) -> SlowTool:
    """An agent ("Toolish") with the calculator and ``slow_tool``, a built-in registered for
    the test only; "call the slow_tool tool 1 times" makes the demo model call it."""
    from agents.models import Tool
    from agents.runtime.tools import FunctionTool
    from agents.tools import registry

    slow = SlowTool()
    monkeypatch.setitem(registry.BUILTINS, "slow_tool", registry.Builtin(
        "slow_tool", "Takes its time.", {"type": "object", "properties": {}},
        lambda row, context: FunctionTool("slow_tool", "Takes its time.", slow.run)))
    agent = make_agent(name="Toolish", tools=("calculator",))
    agent.tools.add(Tool.objects.create(team=agent.team, name="slow_tool", kind="builtin"))
    slow.agent = agent
    return slow
