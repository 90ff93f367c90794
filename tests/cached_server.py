"""What the harnesses that start a real server for a test suite share: ``tests/llm/server.py``
(a llama.cpp server, ``make test-llm``) and ``tests/otel/phoenix.py`` (Arize Phoenix,
``make test-otel``). Each prepares its server once per machine in a cache outside the clone,
starts it for a run and stops it afterwards.

Standard library only, like the harnesses, so any Python 3.11+ can run them. A harness
describes its server with a ``Harness`` (how to prepare it, how to serve it, its environment
variables) and gets this command line::

    python -m <harness> prepare            # prepare the cache once; print what it holds
    python -m <harness> serve [--port N]   # ...and serve until Ctrl-C; print the URL
    python -m <harness> run -- CMD ...     # ...and run CMD against it, then stop it

``run`` gives the command the server's URL in the harness's URL variable, with the harness's
extra variables. When the URL variable is already set, nothing is prepared or started: the
command runs against that server. When this machine cannot prepare the server
(``Unavailable``), the command still runs, with the harness's "unavailable" variable holding
the reason (the first line of the message), so that its tests skip saying why; where the
harness has a "required" variable and it is ``1``, that is an error instead. ``Failed`` (a
preparation that ran and failed, a server that did not start) is always an error: its message
is printed and the exit status is 1; an interrupted command line exits with 130.

The rest is helpers for the harnesses: the cache directory (``$AGENTSITE_CACHE_DIR``, default
``~/.cache/agentsite``, shared by every clone on the machine) and a lock in it, commands run
with their output appended to a log, a virtualenv installed once and marked ready, free ports,
and a server process started in a session of its own, waited for until a URL answers and
stopped with its whole process group.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

LOG_TAIL = 3000  # how much of a log's end an error quotes

Prepared = TypeVar("Prepared")


class Unavailable(Exception):
    """This machine cannot prepare the server at all; the message says why (its first line is
    the reason the tests skip with)."""


class Failed(Exception):
    """A preparation that ran and failed, or a server that did not start; the message quotes
    the log."""


def cache_dir() -> Path:
    """``$AGENTSITE_CACHE_DIR``, by default ``~/.cache/agentsite``."""
    configured = os.environ.get("AGENTSITE_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "agentsite"


def say(label: str, message: str) -> None:
    """``message`` on stderr, after ``[label]``."""
    print(f"[{label}] {message}", file=sys.stderr, flush=True)


# -- preparing the cache ------------------------------------------------------------------------
@contextlib.contextmanager
def locked(lock: Path) -> Iterator[None]:
    """One preparation at a time per lock file (two clones testing at once share the cache)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_logged(what: str, command: Sequence[str], log: Path,
               env: Mapping[str, str] | None = None, failure: type[Exception] = Failed) -> None:
    """Run ``command`` with its output appended to ``log``; ``failure`` when it fails, its
    first line naming ``what`` failed and the last ``ERROR`` line of the output (pip's cause),
    then the log's tail."""
    with open(log, "a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)  # noqa: S603
    if done.returncode:
        output = log.read_text(errors="replace")
        errors = [line.strip() for line in output.splitlines() if line.startswith("ERROR")]
        cause = f": {errors[-1]}" if errors else ""
        raise failure(f"{what} failed (exit {done.returncode}){cause}; log: {log}\n"
                      f"{output[-LOG_TAIL:]}")


def install_venv(venv: Path, requirement: str, *, log: Path, announce: str,
                 say: Callable[[str], None], executable: str = "python",
                 pip_env: Mapping[str, str] | None = None, failure: type[Exception] = Failed,
                 check: Callable[[], None] | None = None) -> Path:
    """``<venv>/bin/<executable>`` of a virtualenv with ``requirement`` installed by pip.

    ``.ready`` in the virtualenv marks a finished install, which is returned at once; an
    unfinished one is removed and redone. Before installing, ``check`` runs (it may raise
    ``Unavailable``), and a Python without ``ensurepip`` raises ``Unavailable``. ``announce``
    is said with the log's path; pip runs with ``pip_env`` added to the environment; a step
    that fails, or an install without the executable, raises ``failure``."""
    target = venv / "bin" / executable
    ready = venv / ".ready"
    if ready.exists() and target.exists():
        return target
    if check is not None:
        check()
    if importlib.util.find_spec("ensurepip") is None:
        raise Unavailable(f"{sys.executable} cannot create a virtualenv (no ensurepip; "
                          "apt-get install python3-venv)")
    if venv.exists():  # an earlier install that did not finish
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    say(f"{announce}; log: {log}")
    started = time.monotonic()
    run_logged("creating a virtualenv", [sys.executable, "-m", "venv", str(venv)], log,
               failure=failure)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(pip_env or {})}
    run_logged(f"pip install {requirement}",
               [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", requirement],
               log, env=env, failure=failure)
    if not target.exists():
        raise failure(f"{requirement} installed no {target}; see {log}")
    took = time.monotonic() - started
    ready.write_text(json.dumps({"requirement": requirement, "python": sys.version.split()[0],
                                 "seconds": round(took)}))
    say(f"installed {requirement} in {took:.0f} s")
    return target


# -- running the server -------------------------------------------------------------------------
def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (all bound at once, so none is handed out twice)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 within two seconds."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def running(command: Sequence[str], *, name: str, ready_url: str, log: Path,
            start_timeout: float, stop_timeout: float,
            env: Mapping[str, str] | None = None) -> Iterator[float]:
    """``command`` in a session of its own, its output in ``log``, until the block ends; yields
    the seconds it took until ``ready_url`` answered. ``Failed``, quoting the log's tail (the
    server is ``name`` in it), when the process ends or ``start_timeout`` passes first. Stopped
    on the way out with ``stop``."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,  # noqa: S603
                                   start_new_session=True, env=env)
    try:
        started = time.monotonic()
        while not answers(ready_url):
            if process.poll() is not None or time.monotonic() > started + start_timeout:
                tail = log.read_text(errors="replace")[-LOG_TAIL:]
                raise Failed(f"{name} did not answer on {ready_url}; its log:\n{tail}")
            time.sleep(0.25)
        yield time.monotonic() - started
    finally:
        stop(process, stop_timeout)


def stop(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to the process's group, SIGKILL when it has not stopped within ``timeout``."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


# -- the command line ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Harness(Generic[Prepared]):
    """One server for a test suite, and its command line (``main``)."""

    prog: str  # how it is started, for --help: "python -m tests.llm.server"
    description: str  # the harness's docstring, for --help
    say: Callable[[str], None]  # its messages on stderr
    # The cache, prepared when needed (may raise ``Unavailable`` or ``Failed``), and what
    # ``prepare`` prints of it: NAME=value lines, told in prepare_help.
    prepare: Callable[[], Prepared]
    describe: Callable[[Prepared], Mapping[str, object]]
    prepare_help: str
    # The server on a port (a free one for None or 0) until the block ends; yields its URL once
    # it answers (raises ``Failed`` when it does not).
    serving: Callable[[Prepared, int | None], AbstractContextManager[str]]
    url_env: str  # the server's URL, for the command
    unavailable_env: str  # why there is none, for the command
    suite: str  # the tests that skip without a server: "<suite> will skip"
    extra_env: Mapping[str, str] = field(default_factory=dict)  # with the URL, for the command
    required_env: str | None = None  # when this variable is "1", ``Unavailable`` is an error
    stop_on_signals: bool = False  # SIGINT and SIGTERM stop the server (see stop_on_signals)

    def main(self, argv: Sequence[str] | None = None) -> int:
        """The command line; its exit status (1 after an error, said; 130 when interrupted)."""
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        commands = parser.add_subparsers(dest="command", required=True)
        commands.add_parser("prepare", help=self.prepare_help)
        serve = commands.add_parser("serve", help="prepare and serve until interrupted")
        serve.add_argument("--port", type=int, default=0)
        run = commands.add_parser("run",
                                  help="prepare, serve, and run a command against the server")
        run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command and its arguments")
        args = parser.parse_args(argv)
        if self.stop_on_signals:
            stop_on_signals()
        try:
            if args.command == "run":
                return self.run_command(_after_dashes(args.cmd))
            if args.command == "prepare":
                print(_lines(self.describe(self.prepare())))
                return 0
            return self.serve(args.port)
        except (Unavailable, Failed) as exc:
            self.say(str(exc))
            return 1
        except KeyboardInterrupt:
            return 130

    def serve(self, port: int) -> int:
        """Prepare and serve on ``port`` (a free one for 0), printing the URL and the extra
        variables, until interrupted."""
        with self.serving(self.prepare(), port) as url:
            print(_lines({self.url_env: url, **self.extra_env}), flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
        return 0

    def run_command(self, cmd: Sequence[str]) -> int:
        """Run ``cmd`` against the server, or told why there is none (see the module's
        docstring); its exit status."""
        if not cmd:
            self.say("run needs a command: run -- CMD ...")
            return 2
        env = {key: value for key, value in os.environ.items() if key != self.unavailable_env}
        if env.get(self.url_env):
            self.say(f"using the server at {env[self.url_env]} ({self.url_env} is set)")
            return subprocess.call(cmd, env=env)  # noqa: S603
        try:
            prepared = self.prepare()
        except Unavailable as exc:
            if self.required_env and env.get(self.required_env) == "1":
                raise
            self.say(f"{exc}\n{self.suite} will skip")
            reason = str(exc).splitlines()[0]  # a log's tail stays on the terminal
            return subprocess.call(cmd, env={**env, self.unavailable_env: reason})  # noqa: S603
        with self.serving(prepared, None) as url:
            env.update({self.url_env: url, **self.extra_env})
            return subprocess.call(cmd, env=env)  # noqa: S603


def stop_on_signals() -> None:
    """SIGTERM and SIGINT raise ``KeyboardInterrupt``, so that the server is stopped on the way
    out, even where SIGINT came ignored (a background job of a script)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _after_dashes(cmd: list[str]) -> list[str]:
    return cmd[1:] if cmd and cmd[0] == "--" else cmd


def _lines(values: Mapping[str, object]) -> str:
    return "\n".join(f"{name}={value}" for name, value in values.items())
