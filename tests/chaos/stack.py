"""The chaos suite's own stack: an embedded Redis that can be killed and brought back on the same
port, a fresh database (a SQLite file, or a throwaway PostgreSQL database that is dropped
afterwards), several Celery worker processes (thread pool, queues ``turns`` and
``maintenance``) and a separate beat process, as production runs them.

Every child runs in a process group of its own and is told by the kernel to die with this
process (``agentsite.processes.Child``); ``ChaosStack.stop`` ends them all and is safe to call
twice (the suite calls it from ``finally``, ``atexit`` and its signal handlers).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentsite.processes import Child, EmbeddedRedis, Printer, free_port

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
READY_TIMEOUT_S = 90.0


def postgres_answers(url: str = PG_ADMIN_URL) -> bool:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3):
            return True
    except Exception:  # noqa: BLE001 - any failure means "not here"
        return False


def _pg_execute(admin_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


@dataclass
class Exit:
    """A child that ended without being told to."""

    name: str
    at: float
    code: int | None
    last_lines: list[str] = field(default_factory=list)


@dataclass
class Slot:
    """One worker position: its current process, and how many times it was started."""

    number: int
    child: Child | None = None
    generation: int = 0
    log: Path | None = None
    expected_exit: bool = False

    @property
    def name(self) -> str:
        return f"chaos{self.number}g{self.generation}"


class ChaosStack:
    def __init__(self, *, db: str, workdir: Path, workers: int = 2, threads: int = 16,
                 pg_admin_url: str = PG_ADMIN_URL, say=print) -> None:
        if workers < 2:
            raise ValueError("the chaos stack needs two workers or more: one is always alive")
        self.db = db
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.workers = workers
        self.threads = threads
        self.pg_admin_url = pg_admin_url
        self.pg_database = ""
        self.say = say
        self.redis: EmbeddedRedis | None = None
        self.redis_port = 0
        self.slots = {n: Slot(n) for n in range(1, workers + 1)}
        self.beat: Child | None = None
        self.beat_generation = 0
        self.exits: list[Exit] = []
        self.env: dict[str, str] = {}
        self._lock = threading.RLock()
        self._stopped = False
        self._files: list = []

    # -- start --------------------------------------------------------------------------------------
    def prepare(self) -> dict[str, str]:
        """Redis up and the database created; returns the environment every process shares
        (the caller configures Django with it, migrates, then calls ``start_processes``)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self.redis_port = free_port()
        self.start_redis()
        env = {
            "DJANGO_SETTINGS_MODULE": "agentsite.settings",
            "AGENTSITE_VAR_DIR": str(self.workdir / "var"),
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "PYTHONUNBUFFERED": "1",
        }
        if self.db == "postgres":
            self.pg_database = f"agentsite_chaos_{os.getpid()}_{int(time.time())}"
            _pg_execute(self.pg_admin_url, f'CREATE DATABASE "{self.pg_database}"')
            base = self.pg_admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgres://", 1)
            env["DATABASE_URL"] = f"{base}/{self.pg_database}"
        self.env = {**os.environ, **env}
        self.env.pop("CHANNEL_LAYER_IN_MEMORY", None)
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        if self.db != "postgres":
            self.env.pop("DATABASE_URL", None)
        return {k: v for k, v in self.env.items() if k in env or k == "DATABASE_URL"}

    def start_processes(self) -> None:
        for slot in self.slots.values():
            self.start_worker(slot.number, wait=False)
        self.start_beat()
        for slot in self.slots.values():
            self.wait_ready(slot.number)

    def _printer(self, path: Path) -> Printer:
        handle = open(path, "a")  # noqa: SIM115 - closed in stop()
        self._files.append(handle)
        return Printer(handle, color=False)

    # -- redis --------------------------------------------------------------------------------------
    def start_redis(self) -> None:
        redis = EmbeddedRedis(port=self.redis_port, data_dir=self.workdir / "redis")
        redis.start(self._printer(self.logs / "redis.log"))
        self.redis = redis
        redis.wait_ready(timeout=15)

    def kill_redis(self) -> None:
        """``kill -9`` of the Redis server: its queues and keys are gone (nothing persisted)."""
        if self.redis is not None:
            self.redis.signal_group(signal.SIGKILL)
            self.redis.wait(5)
            self.redis = None

    def freeze_redis(self) -> None:
        """``SIGSTOP``: Redis hangs, its connections open, nothing answers (``thaw_redis``)."""
        if self.redis is not None:
            self.redis.signal_group(signal.SIGSTOP)

    def thaw_redis(self) -> None:
        if self.redis is not None:
            self.redis.signal_group(signal.SIGCONT)

    # -- the database ------------------------------------------------------------------------------
    def terminate_db_connections(self) -> int:
        """What a failover or a PgBouncer restart does: the server ends every session of the
        run's database but the harness's own (named ``chaos-harness``). How many it ended."""
        import psycopg

        with psycopg.connect(self.pg_admin_url, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid() AND application_name <> %s",
                [self.pg_database, "chaos-harness"]).fetchone()[0]

    # -- workers and beat ----------------------------------------------------------------------
    def _python(self) -> list[str]:
        return [sys.executable, "-m", "tests.chaos.worker"]

    def start_worker(self, number: int, *, wait: bool = True) -> str:
        with self._lock:
            slot = self.slots[number]
            slot.generation += 1
            slot.log = self.logs / f"{slot.name}.log"
            slot.expected_exit = False
            child = Child(slot.name, [*self._python(), "-A", "agentsite", "worker",
                                      "-Q", "turns,maintenance", "-P", "threads", "-c", str(self.threads),
                                      "-n", f"{slot.name}@%h", "--without-gossip", "--without-mingle",
                                      "--loglevel", "INFO"],
                          env=self.env, cwd=ROOT)
            child.start(self._printer(slot.log))
            slot.child = child
        if wait:
            self.wait_ready(number)
        return slot.name

    def wait_ready(self, number: int, timeout: float = READY_TIMEOUT_S) -> None:
        slot = self.slots[number]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = _read(slot.log)
            if " ready." in text:
                return
            if slot.child is None or not slot.child.alive():
                raise RuntimeError(f"worker {slot.name} exited while starting:\n{text[-3000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"worker {slot.name} was not ready within {timeout:.0f} s:\n{_read(slot.log)[-3000:]}")

    def start_beat(self) -> None:
        self.beat_generation += 1
        schedule = self.workdir / "beat" / "celerybeat-schedule"
        schedule.parent.mkdir(parents=True, exist_ok=True)
        name = f"beat{self.beat_generation}"
        self.beat = Child(name, [*self._python(), "-A", "agentsite", "beat", "-s", str(schedule),
                                 "--loglevel", "INFO"], env=self.env, cwd=ROOT)
        self.beat.start(self._printer(self.logs / f"{name}.log"))

    def worker_pid(self, number: int) -> int | None:
        slot = self.slots[number]
        return slot.child.pid if slot.child is not None and slot.child.alive() else None

    def signal_worker(self, number: int, sig: int) -> None:
        """SIGKILL goes to the worker's whole group; SIGTERM to its main process only (Celery's
        warm shutdown, as a service manager sends it)."""
        slot = self.slots[number]
        if slot.child is None or slot.child.proc is None:
            return
        slot.expected_exit = True
        if sig == signal.SIGKILL:
            slot.child.signal_group(signal.SIGKILL)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(slot.child.proc.pid, sig)

    def wait_exit(self, number: int, timeout: float) -> bool:
        slot = self.slots[number]
        return slot.child is None or slot.child.wait(timeout)

    def alive_workers(self) -> list[int]:
        return [n for n, s in self.slots.items() if s.child is not None and s.child.alive()]

    def check_exits(self, *, restart: bool = True) -> list[Exit]:
        """Children that ended by themselves since the last look (recorded in ``exits``);
        restarted when ``restart``."""
        found = []
        with self._lock:
            for slot in self.slots.values():
                if slot.child is None or slot.child.alive() or slot.expected_exit:
                    continue
                found.append(Exit(slot.name, time.time(), slot.child.proc.returncode if slot.child.proc else None,
                                  _last_lines(slot.log)))
                slot.child = None
            if self.beat is not None and not self.beat.alive():
                found.append(Exit(self.beat.name, time.time(),
                                  self.beat.proc.returncode if self.beat.proc else None,
                                  _last_lines(self.logs / f"{self.beat.name}.log")))
                self.beat = None
            self.exits.extend(found)
        if restart:
            for exited in found:
                if exited.name.startswith("beat"):
                    self.start_beat()
                else:
                    number = int(exited.name[len("chaos"):].split("g")[0])
                    self.start_worker(number, wait=False)
        return found

    # -- stop ---------------------------------------------------------------------------------------
    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            children = [s.child for s in self.slots.values() if s.child is not None]
            if self.beat is not None:
                children.append(self.beat)
        for child in children:
            child.signal_group(signal.SIGTERM)
        for child in children:
            child.stop(timeout=5)
        if self.redis is not None:
            self.redis.stop(timeout=5)
            self.redis = None
        for handle in self._files:
            with contextlib.suppress(OSError):
                handle.close()
        if self.pg_database:
            self.drop_database()

    def drop_database(self) -> None:
        try:
            with contextlib.suppress(Exception):
                from django.db import connections

                connections.close_all()
            _pg_execute(self.pg_admin_url, f'DROP DATABASE IF EXISTS "{self.pg_database}" WITH (FORCE)')
        except Exception as exc:  # noqa: BLE001 - said, not raised: the run's figures still count
            self.say(f"could not drop the database {self.pg_database}: {exc}")
        self.pg_database = ""

    def remove_workdir(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def _read(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _last_lines(path: Path | None, count: int = 6) -> list[str]:
    """The end of a log: its last error line (what it died of), then its last lines."""
    lines = [line for line in _read(path).splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "CRITICAL" in line]
    return ([errors[-1]] if errors else []) + lines[-count:]


