"""How ``manage.py dev`` stops: the web server first, then the worker, waited for as long as its
running turns may take, then Redis; a second Ctrl-C stops at once. The children are real
processes that take their time to exit on SIGTERM, as a worker finishing its turns does."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from agentsite import devrunner
from agentsite.devrunner import DevOptions, DevRunner
from agentsite.processes import Child, Printer
from tests.helpers import wait_for

# A child that notes when it gets SIGTERM and exits ``grace`` seconds later.
SLOW_CHILD = """
import sys, time, signal
name, grace, log = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def note(text):
    with open(log, "a") as f:
        f.write(f"{name} {text}\\n")
def term(*_):
    note("term")
    time.sleep(grace)
    note("exit")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def stack(tmp_path):
    """``stack(web=s, worker=s, redis=s, running_turns=fn)``: a runner with three children that
    take that many seconds to exit on SIGTERM; returns the runner, the notes file and the output."""
    notes = tmp_path / "notes.txt"
    output = io.StringIO()
    runners = []

    def make(*, running_turns, **graces: float) -> tuple[DevRunner, Path, io.StringIO]:
        runner = DevRunner(DevOptions(var_dir=tmp_path / "var"), prepare=lambda printer: [],
                           printer=Printer(output, color=False), running_turns=running_turns)
        for name, grace in graces.items():
            runner._start(Child(name, [sys.executable, "-c", SLOW_CHILD, name, str(grace), str(notes)]))
        wait_for(lambda: output.getvalue().count("| ready") == len(graces), what="the children")
        runners.append(runner)
        return runner, notes, output

    yield make
    for runner in runners:
        for child in runner.children:
            child.signal_group(signal.SIGKILL)


def test_it_stops_the_web_first_waits_for_the_worker_s_turns_and_stops_redis_last(stack):
    runner, notes, output = stack(redis=0, worker=2, web=0.3, running_turns=lambda: (2, 5.0))
    worker = next(c for c in runner.children if c.name == "worker")

    runner.shutdown()

    assert notes.read_text().split("\n")[:-1] == [
        "web term", "web exit", "worker term", "worker exit", "redis term", "redis exit"]
    assert worker.proc.returncode == 0  # it finished by itself, nobody killed it
    assert "waiting for 2 running turns to finish, up to 15 s (Ctrl-C again stops them now" in output.getvalue()
    assert not runner.children and not (runner.state_file.exists())


def test_a_worker_past_its_turns_time_limit_is_killed(stack, monkeypatch):
    monkeypatch.setattr(devrunner, "WORKER_STOP_MARGIN_S", 1.0)
    runner, notes, output = stack(worker=60, redis=0, running_turns=lambda: (1, 0.5))
    worker = runner.children[0]

    started = time.monotonic()
    runner.shutdown()

    assert time.monotonic() - started > 1.3  # it waited for the turn first
    assert worker.proc.returncode == -signal.SIGKILL  # then killed it (it ignores SIGTERM for 60 s)
    assert "waiting for 1 running turn to finish, up to 2 s" in output.getvalue()
    assert notes.read_text().split("\n")[:-1] == ["worker term", "redis term", "redis exit"]


def test_a_second_ctrl_c_stops_the_worker_at_once(stack):
    runner, notes, output = stack(worker=60, redis=0, running_turns=lambda: (1, 600.0))
    worker = runner.children[0]
    previous = signal.signal(signal.SIGINT, runner._on_signal)
    try:
        os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C
        assert runner.stopping.is_set() and not runner.forced.is_set()
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()  # the second, later

        runner.shutdown()
    finally:
        signal.signal(signal.SIGINT, previous)

    assert worker.proc.returncode == -signal.SIGKILL  # not the 600 s its turn had left
    text = output.getvalue()
    assert "up to 610 s" in text and "SIGINT received again: stopping everything now" in text


def test_a_runner_that_cannot_count_the_turns_still_waits_for_the_worker(stack):
    def broken() -> tuple[int, float]:
        raise RuntimeError("database is locked")

    runner, _notes, output = stack(worker=1.0, running_turns=broken)
    worker = runner.children[0]
    runner.shutdown()
    assert "could not count the running turns (database is locked)" in output.getvalue()
    assert worker.proc.returncode == 0


def test_the_dev_worker_lets_its_turns_finish_when_stopped(monkeypatch, tmp_path):
    monkeypatch.setenv("TURN_SHUTDOWN", "handoff")
    assert devrunner.worker_env()["TURN_SHUTDOWN"] == "wait"
    assert f"dev-{os.getpid()}@%h" in devrunner.worker_argv(DevOptions(var_dir=tmp_path))
