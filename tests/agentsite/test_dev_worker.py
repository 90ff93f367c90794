"""The development worker runs the reaper itself; beat, its backstop, is a child of the runner of
its own, so that its death is seen: a child that dies is started again, loudly."""

from __future__ import annotations

import io
import sys

from agentsite.devrunner import RESTARTS_PER_MINUTE, DevOptions, DevRunner
from agentsite.processes import Child, Printer


def test_the_dev_worker_consumes_both_queues_and_beat_runs_beside_it(tmp_path):
    from agentsite.devrunner import beat_argv, worker_argv

    argv = worker_argv(DevOptions(var_dir=tmp_path), python="python")
    assert argv[:5] == ["python", "-m", "celery", "-A", "agentsite"]
    assert argv[argv.index("-Q") + 1] == "turns,maintenance"
    assert "-B" not in argv  # beat inside the worker died unseen

    beat = beat_argv(DevOptions(var_dir=tmp_path), python="python")
    assert beat[:6] == ["python", "-m", "celery", "-A", "agentsite", "beat"]
    assert beat[beat.index("-s") + 1] == str(tmp_path / "run" / "celerybeat-schedule")


def test_a_child_that_dies_is_started_again_loudly_until_it_keeps_dying(tmp_path):
    out = io.StringIO()
    runner = DevRunner(DevOptions(var_dir=tmp_path), prepare=lambda printer: [],
                       printer=Printer(out, color=False))
    child = Child("beat", [sys.executable, "-c", "print('beat says goodbye'); raise SystemExit(3)"])
    runner._start(child)
    pids = []
    for _ in range(RESTARTS_PER_MINUTE):
        child.wait(10)
        pids.append(child.pid)
        assert runner._restart(child) is True
    child.wait(10)
    assert runner._restart(child) is False

    lines = out.getvalue().splitlines()
    assert f"   dev | !!! beat (pid {pids[0]}) exited with code 3; starting it again. !!!" in lines
    # its own last words come before the alert
    assert lines.index("  beat | beat says goodbye") < lines.index(
        f"   dev | !!! beat (pid {pids[0]}) exited with code 3; starting it again. !!!")
    assert lines[-1].endswith(f"exited with code 3, {RESTARTS_PER_MINUTE + 1} times within a minute; "
                              "stopping everything. !!!")
    assert len(set(pids)) == RESTARTS_PER_MINUTE
