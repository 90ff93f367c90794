"""The development worker also runs beat, which runs the trace reaper."""

from __future__ import annotations


def test_the_dev_worker_runs_beat_for_the_reaper(tmp_path):
    from agentsite.devrunner import DevOptions, worker_argv

    argv = worker_argv(DevOptions(var_dir=tmp_path), python="python")
    assert argv[:5] == ["python", "-m", "celery", "-A", "agentsite"]
    assert "-B" in argv and argv[argv.index("-s") + 1] == str(tmp_path / "run" / "celerybeat-schedule")
    assert argv[argv.index("-Q") + 1] == "turns,maintenance"
