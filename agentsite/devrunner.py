"""The embedded development runner behind ``manage.py dev``.

It supervises child processes (``agentsite.processes``) — the embedded Redis (only when
``REDIS_URL`` is unset), daphne, a Celery worker and Celery beat — with prefixed, coloured
logs, and starts again, loudly, a child that dies. Each child runs in its own process group and
is told by the kernel to die with the runner, so Ctrl-C, SIGTERM or even a SIGKILL of the runner
leaves nothing behind.

Ctrl-C stops the web server first, then lets the worker finish its running turns (it runs with
``TURN_SHUTDOWN=wait``: no other worker would take them over) up to their time limit; a second
Ctrl-C kills it, and its turns are resumed at the next start.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .processes import Child, EmbeddedRedis, Printer, daphne_command, pid_alive, port_is_free


@dataclass
class DevOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    redis_port: int = 6390
    embedded_redis: bool = True
    worker: bool = True
    base_dir: Path = Path(".")
    var_dir: Path = Path("var")
    log_level: str = "INFO"
    health_timeout: float = 90.0


_MARKERS = {"redis": "redis-server", "web": "daphne", "worker": "celery", "beat": "celery"}
# A child that dies is started again, unless it died this often in the last minute.
RESTARTS_PER_MINUTE = 3
# Checks of /healthz that fail without a worker (``--no-worker``).
WORKER_CHECKS = frozenset({"worker", "workers", "reaper", "turns", "beat"})


def _looks_like(pid: int, marker: str) -> bool:
    """Guard against a recycled pid: only a process whose command line names ``marker``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return bool(marker) and marker in cmdline


def dev_worker_prefix() -> str:
    """How the names of this runner's workers begin (``Trace.worker`` of the turns they run)."""
    return f"dev-{os.getpid()}@"


def worker_argv(opts: DevOptions, *, python: str | None = None) -> list[str]:
    """The development worker: both queues; it runs the reaper itself. Pool and concurrency
    come from settings (the thread pool, 50 turns at once)."""
    return [
        python or sys.executable, "-m", "celery", "-A", "agentsite", "worker",
        "-Q", "turns,maintenance", "--loglevel", opts.log_level, "-n", f"{dev_worker_prefix()}%h",
        "--without-gossip", "--without-mingle",
    ]


def beat_argv(opts: DevOptions, *, python: str | None = None) -> list[str]:
    """Celery beat, for the reaper's backstop, as a child of its own (not ``-B`` inside the
    worker, where its death went unseen), with its schedule file under ``var/run/``."""
    schedule = opts.var_dir / "run" / "celerybeat-schedule"
    schedule.parent.mkdir(parents=True, exist_ok=True)
    return [python or sys.executable, "-m", "celery", "-A", "agentsite", "beat",
            "--loglevel", opts.log_level, "-s", str(schedule)]


def worker_env() -> dict[str, str]:
    """The development worker lets its running turns finish when it is stopped: no other
    worker would take them over."""
    return {**os.environ, "TURN_SHUTDOWN": "wait"}


# Seconds a stopping worker gets beyond its longest running turn's hard time limit, and at
# least, to finish talking to Redis and exit.
WORKER_STOP_MARGIN_S = 10.0
# The web server and anything else but the worker stop within this.
CHILD_STOP_S = 10.0


class DevRunner:
    """Starts the children in order, waits for ``/healthz``, starts again a child that dies, and
    stops them all on a signal or when one keeps dying."""

    def __init__(self, options: DevOptions, *, prepare: Callable[[Printer], list[str]], printer: Printer | None = None,
                 running_turns: Callable[[], tuple[int, float]] | None = None) -> None:
        self.options = options
        self.prepare = prepare
        self.printer = printer or Printer()
        # How many turns the worker runs and the most seconds one may still need (its hard
        # time limit): how long a stopping worker is waited for.
        self.running_turns = running_turns
        self.children: list[Child] = []
        self.stopping = threading.Event()
        self.forced = threading.Event()  # a second Ctrl-C: stop now
        self.state_file = options.var_dir / "run" / "dev.json"

    # -- lifecycle ------------------------------------------------------------------------------
    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            return self._run()
        finally:
            self.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if not self.stopping.is_set():
            self.printer.line("dev", f"{name} received, stopping…")
            self.stopping.set()
        elif not self.forced.is_set():
            self.printer.line("dev", f"{name} received again: stopping everything now; interrupted turns "
                                     "resume at the next start.")
            self.forced.set()

    def _run(self) -> int:
        opts = self.options
        self._reap_stale_children()
        if not port_is_free(opts.host, opts.port):
            self.printer.line("dev", f"Port {opts.port} on {opts.host} is in use. Stop what uses it or pass --port.")
            return 2
        if opts.embedded_redis:
            if not port_is_free("127.0.0.1", opts.redis_port):
                self.printer.line(
                    "dev",
                    f"Port {opts.redis_port} for the embedded Redis is in use. Set EMBEDDED_REDIS_PORT, "
                    "or REDIS_URL to use a Redis you run yourself.",
                )
                return 2
            redis = EmbeddedRedis(port=opts.redis_port, data_dir=opts.var_dir / "redis")
            self._start(redis)
            redis.wait_ready()
            self.printer.line("dev", f"embedded Redis ready on {redis.url} (pid {redis.pid})")
        if self.stopping.is_set():
            return 130

        banner_extra = self.prepare(self.printer)
        if self.stopping.is_set():
            return 130

        python = sys.executable
        self._start(Child("web", daphne_command(python, opts.host, opts.port), cwd=opts.base_dir))
        if opts.worker:
            self._start(Child("worker", worker_argv(opts, python=python), env=worker_env(), cwd=opts.base_dir))
            self._start(Child("beat", beat_argv(opts, python=python), cwd=opts.base_dir))

        url = f"http://{opts.host}:{opts.port}/"
        if not self._wait_healthy(url + "healthz"):
            return 1 if not self.stopping.is_set() else 130
        self.printer.banner([f"agentsite is running at {url}", *banner_extra,
                             f"API: {url}v1 (OpenAI-compatible), {url}api/v1/docs (keys: account menu "
                             "→ API keys)", "Press Ctrl-C to stop."])

        while not self.stopping.wait(0.5):
            dead = next((c for c in self.children if not c.alive()), None)
            if dead is not None and not self._restart(dead):
                return 1
        return 0

    def _restart(self, child: Child) -> bool:
        """Start a child that died again, saying so loudly; False when it keeps dying."""
        child.wait(1)  # its last lines are printed first
        code = child.proc.returncode if child.proc else "?"
        now = time.monotonic()
        child.restarts = [t for t in child.restarts if now - t < 60]
        if len(child.restarts) >= RESTARTS_PER_MINUTE:
            self.printer.alert("dev", f"{child.name} (pid {child.pid}) exited with code {code}, "
                                      f"{len(child.restarts) + 1} times within a minute; stopping everything.")
            return False
        self.printer.alert("dev", f"{child.name} (pid {child.pid}) exited with code {code}; starting it again.")
        child.restarts.append(now)
        child.start(self.printer)
        self._write_state()
        return True

    def _start(self, child: Child) -> None:
        child.start(self.printer)
        self.children.append(child)
        self._write_state()

    def _wait_healthy(self, url: str) -> bool:
        deadline = time.monotonic() + self.options.health_timeout
        last = ""
        while time.monotonic() < deadline and not self.stopping.is_set():
            dead = next((c for c in self.children if not c.alive()), None)
            if dead is not None:
                self.printer.line("dev", f"{dead.name} exited during start-up (code {dead.proc.returncode}).")
                return False
            try:
                with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310 - our own loopback URL
                    if response.status == 200:
                        return True
            except urllib.error.HTTPError as exc:
                body = exc.read().decode(errors="replace")
                if not self.options.worker and self._healthy_without_worker(body):
                    return True
                last = body[:1000]
            except (urllib.error.URLError, OSError):
                pass
            self.stopping.wait(0.25)
        if not self.stopping.is_set():
            self.printer.line("dev", f"/healthz did not report healthy within {self.options.health_timeout:.0f} s. Last answer: {last or 'none'}")
        return False

    @staticmethod
    def _healthy_without_worker(body: str) -> bool:
        """With --no-worker, the worker check is expected to fail; the rest must pass."""
        try:
            checks = json.loads(body)["checks"]
        except (ValueError, KeyError, TypeError):
            return False
        return all(check.get("ok") for name, check in checks.items() if name not in WORKER_CHECKS)

    def shutdown(self) -> None:
        """The web server first (no new messages), then the worker, waited for as long as its
        running turns may still take (a second Ctrl-C cuts that short), then the rest, and
        Redis last, so the worker can finish talking to it."""
        order = {"web": 0, "worker": 1, "redis": 3}
        for child in sorted(self.children, key=lambda c: order.get(c.name, 2)):
            if child.name == "worker":
                self._stop_worker(child)
            else:
                self._stop_child(child, CHILD_STOP_S if child.name != "redis" else 5.0)
        if self.children:
            self.printer.line("dev", "stopped: " + ", ".join(f"{c.name} (pid {c.pid})" for c in self.children))
        self.children.clear()
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    def _stop_worker(self, worker: Child) -> None:
        if not worker.alive():
            self._stop_child(worker, 0)
            return
        count, seconds = self._turns_left()
        budget = max(seconds, 0.0) + WORKER_STOP_MARGIN_S
        if count:
            self.printer.line("dev", f"waiting for {count} running turn{'s' if count != 1 else ''} to finish, "
                                     f"up to {budget:.0f} s (Ctrl-C again stops them now; they resume at "
                                     "the next start)")
        self._stop_child(worker, budget)

    def _turns_left(self) -> tuple[int, float]:
        if self.running_turns is None:
            return 0, 0.0
        try:
            return self.running_turns()
        except Exception as exc:  # noqa: BLE001 - stopping must go on; wait the longest limit
            self.printer.line("dev", f"could not count the running turns ({exc}); waiting up to the longest limit")
            return 0, 3600.0 + 30

    def _stop_child(self, child: Child, timeout: float) -> None:
        """SIGTERM the child's group and wait up to ``timeout`` (or until a second Ctrl-C),
        then SIGKILL what is left."""
        if child.proc is None:
            return
        child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while not self.forced.is_set() and time.monotonic() < deadline:
            if child.wait(min(0.2, max(deadline - time.monotonic(), 0.01))):
                break
        if child.alive():
            child.signal_group(signal.SIGKILL)
            child.wait(5)
        child.signal_group(signal.SIGKILL)  # anything the child started in its group goes too

    # -- state file: lets a later run clean up after a runner that was killed -------------------
    def _write_state(self) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        state = {"runner": os.getpid(), "children": {c.name: c.pid for c in self.children}}
        self.state_file.write_text(json.dumps(state))

    def _reap_stale_children(self) -> None:
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return
        if pid_alive(int(state.get("runner", 0) or 0)):
            return  # another runner is alive; the port checks will say so
        for name, pid in (state.get("children") or {}).items():
            if pid and pid_alive(pid) and _looks_like(pid, _MARKERS.get(name, "")):
                self.printer.line("dev", f"stopping {name} (pid {pid}) left over from an earlier run")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGTERM)
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
