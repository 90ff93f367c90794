"""A throwaway copy of the whole product for browser tests and benchmarks.

``Stack`` starts, on free loopback ports and in a temporary directory: the embedded Redis
(``processes.EmbeddedRedis``), a migrated file SQLite database that every process shares,
daphne (HTTP and websockets), a Celery worker and Celery beat, as in production; ``stop`` ends
them all. Django's own ``live_server`` cannot serve websockets, hence real processes.

``Stack(debug=False)`` runs it with production settings instead (``DEBUG=0``, a throwaway
``SECRET_KEY``, static files collected, over plain HTTP on loopback: ``SECURE_SSL_REDIRECT=0``;
session cookies stay ``Secure``, so sign in over HTTPS or use the API); ``database_url`` points
every process at that database (migrated at start; the caller creates and drops it) instead of
the file SQLite; ``beat=False`` leaves Celery beat out.

``Stack.seed(spec)`` fills it through ``manage.py seed_stack`` (in the stack's environment): the personas of ``agentsite.personas`` (alice, bob and vera in Team A, charlie
in Team B) and demo agents as the spec says. The test process itself never opens the database.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from .processes import Child, EmbeddedRedis, Printer, daphne_command, free_port

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "stack-pass-123"  # noqa: S105 - throwaway accounts of a throwaway database


class Stack:
    def __init__(self, *, workdir: Path | None = None, worker_threads: int = 8,
                 extra_env: dict[str, str] | None = None, debug: bool = True,
                 database_url: str | None = None, beat: bool = True) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="agentsite-stack-"))
        self.owns_workdir = workdir is None
        self.worker_threads = worker_threads
        self.extra_env = extra_env or {}
        self.debug = debug
        self.database_url = database_url
        self.beat = beat
        self.children: list[Child] = []
        self.port = 0
        self.env: dict[str, str] = {}
        self.log_path = self.workdir / "stack.log"
        self._log = None
        self.printer = Printer(sys.stderr, color=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pid(self, name: str) -> int | None:
        """The process id of the child called ``name`` ("web", "worker", "beat", "redis")."""
        return next((c.pid for c in self.children if c.name == name), None)

    def start(self, timeout: float = 60.0) -> Stack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        printer = Printer(self._log, color=False)
        redis = EmbeddedRedis(port=free_port(), data_dir=self.workdir / "redis")
        self._start(redis, printer)
        redis.wait_ready()
        self.port = free_port()
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "agentsite.settings",
            "AGENTSITE_VAR_DIR": str(self.workdir / "var"),
            "REDIS_URL": redis.url,
            "DEBUG": "1",
            "CHANNEL_LAYER_IN_MEMORY": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            # The browser tests' model and tool servers run on this machine.
            "OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            **self._settings_env(),
            **self.extra_env,
        }
        if self.database_url is None:
            self.env.pop("DATABASE_URL", None)
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],  # noqa: S603
                       cwd=ROOT, env=self.env, check=True, stdout=self._log, stderr=subprocess.STDOUT)
        if not self.debug:  # production serves hashed static files from collectstatic's output
            subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],  # noqa: S603
                           cwd=ROOT, env=self.env, check=True, stdout=self._log, stderr=subprocess.STDOUT)
        python = sys.executable
        self.printer = printer
        self._start(self._web(), printer)
        self._start(Child("worker", [python, "-m", "celery", "-A", "agentsite", "worker",
                                     "-Q", "turns,maintenance", "-P", "threads",
                                     "-c", str(self.worker_threads), "-n", f"stack-{uuid.uuid4().hex[:8]}@%h",
                                     "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
                          env=self.env, cwd=ROOT), printer)
        if self.beat:
            self._start(Child("beat", [python, "-m", "celery", "-A", "agentsite", "beat", "--loglevel", "WARNING",
                                       "-s", str(self.workdir / "var" / "celerybeat-schedule")],
                              env=self.env, cwd=ROOT), printer)
        self._wait_healthy(timeout)
        return self

    def _settings_env(self) -> dict[str, str]:
        """What ``debug`` and ``database_url`` set (``extra_env`` still overrides it)."""
        env = {}
        if not self.debug:
            env.update(DEBUG="0", SECRET_KEY=secrets.token_urlsafe(50), SECURE_SSL_REDIRECT="0")
        if self.database_url is not None:
            env["DATABASE_URL"] = self.database_url
        return env

    def _web(self) -> Child:
        return Child("web", daphne_command(sys.executable, "127.0.0.1", self.port), env=self.env, cwd=ROOT)

    def stop_web(self) -> None:
        """Stop the web process (sockets drop; the worker and Redis stay up)."""
        web = next(c for c in self.children if c.name == "web")
        web.stop(timeout=10)
        self.children.remove(web)

    def start_web(self, timeout: float = 30.0) -> None:
        self._start(self._web(), self.printer)
        self._wait_healthy(timeout)

    def _start(self, child: Child, printer: Printer) -> None:
        child.start(printer)
        self.children.append(child)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            dead = next((c for c in self.children if not c.alive()), None)
            if dead is not None:
                raise RuntimeError(f"{dead.name} exited during start-up; see {self.log_path}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=3) as response:  # noqa: S310 - loopback
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                last = exc.read().decode(errors="replace")[:300]
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the stack was not healthy within {timeout:.0f} s ({last}); see {self.log_path}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def seed(self, spec: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create the people, team and agents (``manage.py seed_stack``); their public ids."""
        done = subprocess.run([sys.executable, "manage.py", "seed_stack", json.dumps(spec or {})],  # noqa: S603
                              cwd=ROOT, env=self.env, check=True, capture_output=True, text=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop(timeout=10)
        self.children.clear()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
