"""Flame graphs of a benchmark's processes: ``profiled(bench, pids, directory)`` attaches
``py-spy record`` to those processes for the block and writes one SVG flame graph per process
into ``directory`` (``--profile DIR``, or ``BENCH_PROFILE_DIR``; ``BENCH_PROFILE_GIL=1`` samples
only the threads holding the GIL; ``BENCH_PROFILE_IDLE=1`` samples waiting threads too, each
thread apart, for where a request's wall time goes; ``BENCH_PROFILE_FORMAT=raw`` writes
collapsed stacks instead).
``make bench-profile`` runs every benchmark with it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path

PROFILE_ENV = "BENCH_PROFILE_DIR"
PROFILE_GIL_ENV = "BENCH_PROFILE_GIL"
PROFILE_IDLE_ENV = "BENCH_PROFILE_IDLE"  # wall time: idle threads sampled too, one stack per thread
PROFILE_RATE = 100  # samples per second


def add_profile_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", metavar="DIR", default=os.environ.get(PROFILE_ENV) or None,
                        help=f"write py-spy flame graphs (SVG) of the measured processes into DIR "
                             f"(default: ${PROFILE_ENV}; ${PROFILE_GIL_ENV}=1 samples only the "
                             "threads holding the GIL)")


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def profiled(bench: str, pids: Mapping[str, int | None], directory: str | os.PathLike[str] | None,
             *, subprocesses: tuple[str, ...] = ()) -> Iterator[list[Path]]:
    """``py-spy record`` on each process of ``pids`` while the block runs (nothing without
    ``directory``); yields the SVG paths, which are written when the block ends (py-spy gets
    SIGINT). ``subprocesses`` names processes whose children are sampled too."""
    if not directory:
        yield []
        return
    py_spy = _py_spy()
    folder = Path(directory).resolve()
    if py_spy is None:
        print("profile: py-spy is not installed (pip install -e '.[bench]'): no flame graph", flush=True)
        yield []
        return
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")  # noqa: DTZ005 - a file name on this machine
    gil = os.environ.get(PROFILE_GIL_ENV, "") not in ("", "0")
    running: list[tuple[str, int, Path, subprocess.Popen, Path]] = []
    for name, pid in pids.items():
        if pid is None:
            continue
        svg = folder / f"{bench}-{name}-{stamp}.svg"
        log = svg.with_suffix(".log")
        command = [py_spy, "record", "--pid", str(pid), "--format", os.environ.get("BENCH_PROFILE_FORMAT", "flamegraph"), "--output", str(svg),
                   "--rate", str(PROFILE_RATE), "--nonblocking"]
        if gil:
            command.append("--gil")
        if os.environ.get(PROFILE_IDLE_ENV, "") not in ("", "0"):
            command += ["--idle", "--threads"]
        if name in subprocesses:
            command.append("--subprocesses")
        with open(log, "w") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        running.append((name, pid, svg, process, log))
    time.sleep(1.0)  # py-spy attaches
    for name, pid, _svg, process, log in running:
        if process.poll() is not None:
            print(f"profile: py-spy could not attach to {name} (pid {pid}; it needs ptrace: run as "
                  f"root or allow it with kernel.yama.ptrace_scope=0): {_tail(log)}", flush=True)
    paths = [svg for _, _, svg, _, _ in running]
    try:
        yield paths
    finally:
        for _name, _pid, _svg, process, _log in running:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for name, pid, svg, process, log in running:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if svg.exists():
                print(f"profile: flame graph of {name} (pid {pid}{', GIL only' if gil else ''}): {svg}",
                      flush=True)
                log.unlink(missing_ok=True)
            else:
                print(f"profile: no flame graph of {name} (pid {pid}): {_tail(log)}", flush=True)


def _tail(path: Path, chars: int = 300) -> str:
    try:
        return " ".join(path.read_text(errors="replace").split())[-chars:]
    except OSError:
        return ""
