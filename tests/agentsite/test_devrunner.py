"""``manage.py dev`` as a newcomer runs it: real children, real signals, no orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agentsite.processes import EmbeddedRedis, Printer, free_port, pid_alive
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.own_stack]


def dev_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    port_file = tmp_path / "redis-port"
    if not port_file.exists():
        port_file.write_text(str(free_port()))
    env.update(AGENTSITE_VAR_DIR=str(tmp_path / "var"), EMBEDDED_REDIS_PORT=port_file.read_text(),
               NO_COLOR="1", DEMO_PASSWORD="demo-pass-for-tests")
    return env


def start_dev(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, Path, int]:
    port = free_port()
    log = tmp_path / "dev.log"
    proc = subprocess.Popen(  # noqa: S603
        [sys.executable, "manage.py", "dev", "--port", str(port), *extra],
        cwd=ROOT, env=dev_env(tmp_path), stdout=log.open("w"), stderr=subprocess.STDOUT,
    )
    return proc, log, port


def dev_shell(tmp_path: Path, code: str) -> str:
    """Run ``code`` in ``manage.py shell`` against the dev runner's database and Redis."""
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT,  # noqa: S603
                          env=dev_env(tmp_path), capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip().splitlines()[-1]  # after the shell's own notes


def children_of(var: Path) -> dict[str, int]:
    try:
        return json.loads((var / "run" / "dev.json").read_text())["children"]
    except (OSError, ValueError, KeyError):
        return {}


def test_dev_starts_everything_and_ctrl_c_leaves_nothing(tmp_path):
    proc, log, port = start_dev(tmp_path)
    try:
        wait_for(lambda: "Press Ctrl-C to stop." in log.read_text(), timeout=120, interval=0.1, what="the banner")
        text = log.read_text()
        assert f"agentsite is running at http://127.0.0.1:{port}/" in text
        assert "Log in as demo / demo-pass-for-tests" in text
        assert " redis |" in text and "   web |" in text and "worker |" in text  # prefixed logs
        children = children_of(tmp_path / "var")
        assert set(children) == {"redis", "web", "worker", "beat"}
        assert all(pid_alive(pid) for pid in children.values())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:  # noqa: S310
            health = json.loads(response.read())
        assert health["status"] == "ok" and health["checks"]["redis"]["embedded"] is True
        assert health["checks"]["beat"]["ok"] and health["checks"]["reaper"]["ok"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5) as response:  # noqa: S310
            assert b"Log in" in response.read()

        # a beat that dies is said loudly and started again
        os.killpg(children["beat"], signal.SIGKILL)
        wait_for(lambda: children_of(tmp_path / "var").get("beat") not in (None, children["beat"]),
                 timeout=10, interval=0.1, what="a new beat")
        assert f"!!! beat (pid {children['beat']}) exited with code -9; starting it again. !!!" in log.read_text()
        children = children_of(tmp_path / "var")

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        for name, pid in children.items():
            wait_for(lambda pid=pid: not pid_alive(pid), timeout=10, interval=0.1, what=f"{name} (pid {pid}) to exit")
        assert not (tmp_path / "var" / "run" / "dev.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_children_die_with_a_killed_runner(tmp_path):
    proc, log, _port = start_dev(tmp_path, "--no-worker")
    try:
        wait_for(lambda: "Press Ctrl-C to stop." in log.read_text(), timeout=120, interval=0.1, what="the banner")
        children = children_of(tmp_path / "var")
        assert set(children) == {"redis", "web"}
        proc.kill()  # SIGKILL: the runner gets no chance to clean up
        proc.wait(timeout=10)
        for name, pid in children.items():
            wait_for(lambda pid=pid: not pid_alive(pid), timeout=15, interval=0.1, what=f"{name} (pid {pid}) to exit")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_embedded_redis_stops_without_orphan(tmp_path):
    server = EmbeddedRedis(port=free_port(), data_dir=tmp_path / "redis")
    with (tmp_path / "redis.log").open("w") as log:
        server.start(Printer(log, color=False))
        server.wait_ready()
        pid = server.pid
        assert server.ping() and pid_alive(pid)
        server.stop(timeout=5)
    assert not pid_alive(pid)
    assert not server.ping()
    # Nothing was persisted: --save '' and --appendonly no.
    assert list((tmp_path / "redis").iterdir()) == []


def test_a_busy_port_is_reported_plainly(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc, log, _ = start_dev(tmp_path, "--port", str(port))
        # start_dev already passes a --port; the last one wins in argparse.
        assert proc.wait(timeout=60) == 2
        assert f"Port {port} on 127.0.0.1 is in use" in log.read_text()
        assert not children_of(tmp_path / "var")


START_SLOW_TURN = """
from agents.chat.services import conversation_create
from agents.config.seed import DEMO_AGENT
from agents.models import Agent
from agents.turns.services import turn_start
from agentsite.models import Membership
from django.contrib.auth import get_user_model
agent = Agent.objects.select_related("provider").get(name=DEMO_AGENT)
agent.provider.options = {"request_latency_s": 7}  # two requests: the calculator, the answer
agent.provider.save()
user = get_user_model().objects.get(username="demo")
membership = Membership.objects.select_related("user", "team").get(user=user, team=agent.team)
conversation = conversation_create(agent=agent, membership=membership)
print(turn_start(conversation=conversation, membership=membership, text="What is 2 + 3?").pk)
"""
TRACE_STATE = """
from traces.models import Trace
trace = Trace.objects.get(pk={pk})
print(trace.status, trace.answer, trace.worker.startswith("dev-"), sep="|")
"""


def test_ctrl_c_lets_a_running_turn_finish_past_the_old_ten_seconds(tmp_path):
    proc, log, _port = start_dev(tmp_path)
    try:
        wait_for(lambda: "Press Ctrl-C to stop." in log.read_text(), timeout=120, interval=0.1, what="the banner")
        pk = dev_shell(tmp_path, START_SLOW_TURN)
        wait_for(lambda: dev_shell(tmp_path, TRACE_STATE.format(pk=pk)).startswith("running|"),
                 timeout=30, interval=0.5, what="the turn to start")

        proc.send_signal(signal.SIGINT)
        stopped = time.monotonic()
        assert proc.wait(timeout=90) == 0
        took = time.monotonic() - stopped
        text = log.read_text()
        assert "waiting for 1 running turn to finish, up to " in text
        assert text.index("waiting for 1 running turn") < text.index("stopped: ")
        assert took > 10  # longer than the ten seconds children used to get
    finally:
        if proc.poll() is None:
            proc.kill()
    # The turn completed on the stopping worker; nothing was left running.
    assert dev_shell(tmp_path, TRACE_STATE.format(pk=pk)) == "completed|2 + 3 = 5.|True"
