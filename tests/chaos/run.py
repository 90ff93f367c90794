"""One chaos run against one database: start the stack, seed a team and two agents that talk to
the fake model server, play the scenarios, wait for everything to settle (bounded), and collect
the figures.

Scenarios, in this order:

* **faults**: turns against ``/faulty/``, where 30 % of model requests fail (5xx, cut streams);
* **kills**: ``kill -9`` of a worker that runs turns, at a random moment, then a restart; the
  other workers stay up throughout. A worker running a turn that has used up its resumptions
  (``TURN_MAX_RESUMES``) is spared: cutting that turn off again would test the limit (it ends
  ``interrupted`` by design), not resumption;
* **sigterm**: a warm stop (SIGTERM) of a worker mid-turn, as a service manager stops it; after
  ``stop_timeout_s`` it gets SIGKILL, as from a service manager whose stop timeout ran out;
* **redis**: ``kill -9`` of Redis while turns run, a message sent while it is down, Redis
  started again on the same port; workers that exit by themselves are counted and restarted.

Meanwhile the harness keeps ``in_flight`` turns of the steady agent queued or running.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import signal
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .collect import Event, Sent, collect
from .model_server import LOOKUP_TOOL, MODEL, FakeModelServer
from .stack import ChaosStack

# A queued trace younger than this counts as in flight (see ``ChaosRun.in_flight``).
RECENT_QUEUED_S = 15.0


@dataclass
class Options:
    db: str = "sqlite"
    kills: int = 30
    redis_restarts: int = 5
    sigterms: int = 3
    fault_turns: int = 50
    workers: int = 3
    threads: int = 16
    in_flight: int = 8
    latency_s: float = 2.0
    tool_latency_s: float = 2.0
    fault_rate: float = 0.3
    seed: int = 13
    settle_s: float = 60.0
    time_limit_s: float = 480.0
    stop_timeout_s: float = 30.0
    redis_down_s: float = 3.0
    redis_watch_s: float = 10.0
    # Redis stopped (SIGSTOP: hung, not dead) this many times, this long each.
    redis_freezes: int = 1
    redis_freeze_s: float = 20.0
    # Every database connection terminated (PostgreSQL only: pg_terminate_backend) with turns in
    # flight, this many times.
    db_drops: int = 2
    kill_delay_max_s: float = 3.0
    keep: bool = False


@dataclass
class World:
    team: Any
    user: Any
    membership: Any  # the owner's, as a request resolves it: what the services act for
    steady: Any
    faulty: Any


def world_seed(model_url: str) -> World:
    """A team, its owner, the lookup (HTTP) and calculator tools, a price for the fake model,
    and two agents: one on the steady endpoint, one on the faulty one."""
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from agents.config.versions import agent_save
    from agents.models import Agent, Provider, Tool
    from agents.tools.services import tools_sync_builtins
    from agentsite.models import Membership
    from agentsite.personas import member_add, team_get_or_create
    from traces.models import ModelPrice

    team = team_get_or_create(name="Chaos team")
    user = member_add(team=team, username="chaos", role=Membership.Role.OWNER)
    tools_sync_builtins(team)
    calculator = Tool.objects.get(team=team, kind=Tool.Kind.BUILTIN, name="calculator")
    lookup = Tool.objects.create(
        team=team, name=LOOKUP_TOOL, kind=Tool.Kind.HTTP, http_method="GET", idempotent=True,
        description="Look a key up (slow: it takes a few seconds).", timeout_s=30,
        parameters={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        url_template=f"{model_url}/tool/lookup?key={{key}}")
    ModelPrice.objects.create(team=team, provider_kind="openai", model=MODEL,
                              input_per_mtok=Decimal("1.5"), output_per_mtok=Decimal("6"),
                              effective_from=timezone.now() - timedelta(days=1))
    agents = []
    for name, path in (("Chaos steady", "/v1"), ("Chaos faulty", "/faulty/v1")):
        provider = Provider.objects.create(team=team, name=f"Fake model {path}", kind="openai",
                                           base_url=f"{model_url}{path}", timeout_s=30)
        agent = Agent(team=team, name=name, provider=provider, model=MODEL,
                      tool_dispatcher=Agent.Dispatcher.NATIVE,
                      system_prompt="Look the key up, compute, then answer.")
        agent_save(agent=agent, tools=[lookup, calculator], user=user)
        agents.append(agent)
    membership = Membership.objects.select_related("user", "team").get(team=team, user=user)
    return World(team, user, membership, *agents)


class HandBackWatch:
    """Watches, from outside, the turns a kill cut off: the first moment each is no longer
    ``running`` on the dead worker (handed back, resumed elsewhere or ended). Where a trace
    does not say when it was handed back (a later hand-back overwrote it), this is when."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.pending: dict[tuple[float, int], str] = {}
        self.seen: dict[tuple[float, int], float] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="hand-back-watch")

    def start(self) -> HandBackWatch:
        self.thread.start()
        return self

    def add(self, at: float, worker: str, trace_ids: list[int]) -> None:
        with self.lock:
            for trace_id in trace_ids:
                self.pending[(at, trace_id)] = worker

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        from django.db import connection

        from traces.models import Trace

        try:
            while not self.stopping.wait(self.interval):
                with self.lock:
                    pending = dict(self.pending)
                if not pending:
                    continue
                rows = {r["id"]: r for r in Trace.objects.filter(
                    pk__in={tid for _, tid in pending}).values("id", "status", "worker")}
                now = time.time()
                with self.lock:
                    for (at, trace_id), worker in pending.items():
                        row = rows.get(trace_id)
                        if row is None or row["status"] != "running" or not row["worker"].startswith(f"{worker}@"):
                            self.seen[(at, trace_id)] = now
                            self.pending.pop((at, trace_id), None)
        finally:
            connection.close()


class ChaosRun:
    def __init__(self, options: Options, stack: ChaosStack, server: FakeModelServer, world: World,
                 say: Any = print) -> None:
        self.o = options
        self.stack = stack
        self.server = server
        self.world = world
        self.rng = random.Random(options.seed)
        self.sends: list[Sent] = []
        self.events: list[Event] = []
        self.started = time.monotonic()
        self.watch = HandBackWatch()
        self.deadline = self.started + options.time_limit_s - options.settle_s - 30
        self._say = say
        # Each fault kind: how many were planned and how many were made (a run that ran out of
        # time before its faults must not pass as if it had met them).
        self.planned = {"kills": options.kills, "sigterms": options.sigterms,
                        "redis_restarts": options.redis_restarts,
                        "redis_freezes": options.redis_freezes,
                        "db_drops": options.db_drops if options.db == "postgres" else 0,
                        "fault_turns": options.fault_turns}
        self.injected = dict.fromkeys(self.planned, 0)

    def say(self, text: str) -> None:
        self._say(f"[chaos {self.o.db} {time.monotonic() - self.started:6.1f}s] {text}")

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    # -- sending ------------------------------------------------------------------------------------
    def send(self, scenario: str, agent: Any = None) -> Sent:
        """A new conversation and a message in it, as the chat sends it (``turn_send``). An error
        is recorded, not raised: the message may have been stored anyway."""
        from agents.access import conversation_act_check
        from agents.chat.services import conversation_create
        from agents.turns.services import turn_send

        agent = agent or self.world.steady
        token = uuid.uuid4().hex[:16]
        sent = Sent(token, scenario, time.time())
        try:
            conversation = conversation_create(agent=agent, membership=self.world.membership)
            acting = conversation_act_check(self.world.membership, conversation, "send messages in it")
            turn = turn_send(acting=acting, client_id=token,
                             text=f"Look up my key, then compute 17 * 23. [chaos:{token}]")
            sent.trace_id = turn.trace.pk
        except Exception as exc:  # noqa: BLE001 - what the chat would have shown, kept for the report
            sent.error = f"{type(exc).__name__}: {exc}"
        sent.finished_at = time.time()
        self.sends.append(sent)
        return sent

    def in_flight_ids(self, *, agent: Any = None, queued_since_s: float | None = None) -> list[int]:
        """Traces (of ``agent``, or all) queued, or running on a live worker. A trace left
        ``running`` by a dead worker is not in flight; with ``queued_since_s``, neither is one
        queued longer ago than that (its task may be lost with Redis)."""
        from datetime import timedelta

        from django.db.models import Q
        from django.utils import timezone

        from traces.models import Trace

        live = Q()
        for number in self.stack.alive_workers():
            live |= Q(worker__startswith=f"{self.stack.slots[number].name}@")
        flying = Q(status=Trace.Status.QUEUED)
        if queued_since_s is not None:
            flying &= Q(created_at__gte=timezone.now() - timedelta(seconds=queued_since_s))
        if live:
            flying |= Q(status=Trace.Status.RUNNING) & live
        rows = Trace.objects.filter(flying)
        if agent is not None:
            rows = rows.filter(agent=agent)
        return list(rows.values_list("id", flat=True))

    def in_flight(self) -> int:
        """The steady agent's turns in flight, for the top-up (see ``in_flight_ids``): a turn
        stranded by an earlier kill or Redis restart would starve the scenarios of turns to
        cut off."""
        return len(self.in_flight_ids(agent=self.world.steady, queued_since_s=RECENT_QUEUED_S))

    def top_up(self) -> None:
        for _ in range(max(self.o.in_flight - self.in_flight(), 0)):
            self.send("steady")

    # -- looking at workers -------------------------------------------------------------------------
    def running_on(self, name: str) -> list[int]:
        from traces.models import Trace

        return list(Trace.objects.filter(status=Trace.Status.RUNNING, worker__startswith=f"{name}@")
                    .values_list("id", flat=True))

    def landing(self, trace_ids: list[int]) -> dict[int, str]:
        """What each trace was doing: the kind of its running step, if any."""
        from traces.models import Step

        found = {tid: "between steps" for tid in trace_ids}
        for trace_id, kind in (Step.objects.filter(trace_id__in=trace_ids, status__in=["running", "waiting"])
                               .order_by("seq").values_list("trace_id", "kind")):
            found[trace_id] = kind
        return found

    def recorded_calls(self, trace_ids: list[int]) -> list[str]:
        """The lookup calls of these traces whose result is stored: none of them may run again."""
        from traces.models import Step

        return list(Step.objects.filter(trace_id__in=trace_ids, kind=Step.Kind.TOOL_CALL,
                                        name=LOOKUP_TOOL, status=Step.Status.OK)
                    .values_list("call_id", flat=True))

    def spent(self, trace_ids: list[int]) -> bool:
        """Whether one of these turns has used all its resumptions (``TURN_MAX_RESUMES``):
        cutting it off again tests that limit (it ends ``interrupted`` by design), not
        resumption."""
        from agents.turns.lifecycle import may_resume
        from traces.models import Trace

        return any(not may_resume(attempts=attempts, meta=meta) for attempts, meta in
                   Trace.objects.filter(pk__in=trace_ids).values_list("attempts", "meta"))

    def pick_victim(self, timeout: float = 20.0) -> int:
        """A live worker that runs turns now, none of which has used up its resumptions (any
        live one if there is none within ``timeout``), once every other worker is up and
        consuming, so one always stays alive."""
        self.stack.check_exits()
        for number in self.stack.slots:
            self.stack.wait_ready(number)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.stack.check_exits()
            busy = []
            for number in self.stack.alive_workers():
                running = self.running_on(self.stack.slots[number].name)
                if running and not self.spent(running):
                    busy.append(number)
            if busy:
                return self.rng.choice(sorted(busy))
            self.top_up()
            time.sleep(0.25)
        return self.rng.choice(sorted(self.stack.alive_workers()))

    # -- scenarios ----------------------------------------------------------------------------------
    def next_victim(self, label: str, number: int) -> int | None:
        """Before the ``number``-th fault of a kind: None when the run is out of time (said,
        so the shortfall shows); else the stack checked, the turns in flight topped up, and a
        worker slot running one of them (``pick_victim``)."""
        if self.time_left() <= 0:
            self.say(f"{label}: out of time after {number - 1}")
            return None
        self.stack.check_exits()
        self.top_up()
        return self.pick_victim()

    def faults(self) -> None:
        if not self.o.fault_turns:
            return
        self.say(f"faults: {self.o.fault_turns} turns against the faulty endpoint "
                 f"({self.o.fault_rate:.0%} of requests fail)")
        ids = [s.trace_id for s in (self.send("faults", self.world.faulty)
                                    for _ in range(self.o.fault_turns)) if s.trace_id]
        self.injected["fault_turns"] = len(ids)
        self.wait_settled(ids, timeout=min(120.0, max(self.time_left(), 30.0)))

    def kills(self) -> None:
        for number in range(1, self.o.kills + 1):
            slot = self.next_victim("kills", number)
            if slot is None:
                return
            time.sleep(self.rng.uniform(0, self.o.kill_delay_max_s))
            name = self.stack.slots[slot].name
            if self.spent(self.running_on(name)) and self.stack.alive_workers() != [slot]:
                slot = self.pick_victim()  # it took a turn meanwhile that may not be cut off again
                name = self.stack.slots[slot].name
            at = time.time()
            self.stack.signal_worker(slot, signal.SIGKILL)
            self.stack.wait_exit(slot, 10)
            # A dead worker changes nothing: what runs on it now is what the kill cut off.
            victims = self.running_on(name)
            landing = self.landing(victims)
            self.watch.add(at, name, victims)
            self.events.append(Event("sigkill", at, name, victims, landing,
                                     recorded_calls=self.recorded_calls(victims)))
            self.injected["kills"] += 1
            self.say(f"kill {number}/{self.o.kills}: {name}, {len(victims)} turn(s) in flight "
                     f"({', '.join(sorted(landing.values())) or 'none'})")
            self.stack.start_worker(slot)

    def sigterms(self) -> None:
        for number in range(1, self.o.sigterms + 1):
            slot = self.next_victim("sigterm", number)
            if slot is None:
                return
            time.sleep(self.rng.uniform(0.5, self.o.kill_delay_max_s))
            name = self.stack.slots[slot].name
            victims = self.running_on(name)
            at = time.time()
            self.stack.signal_worker(slot, signal.SIGTERM)
            exited = self.stack.wait_exit(slot, self.o.stop_timeout_s)
            stop_s = time.time() - at
            if not exited:
                self.stack.signal_worker(slot, signal.SIGKILL)
                self.stack.wait_exit(slot, 10)
            victims = sorted(set(victims) | set(self.running_on(name)))
            self.events.append(Event("sigterm", at, name, victims, self.landing(victims),
                                     stop_s=round(stop_s, 2), forced=not exited,
                                     recorded_calls=self.recorded_calls(victims),
                                     recorded_at=time.time()))
            self.injected["sigterms"] += 1
            self.say(f"sigterm {number}/{self.o.sigterms}: {name}, {len(victims)} turn(s) in flight; "
                     + (f"exited after {stop_s:.1f} s" if exited else
                        f"still running after {self.o.stop_timeout_s:g} s: SIGKILL"))
            self.stack.start_worker(slot)

    def redis_restarts(self) -> None:
        for number in range(1, self.o.redis_restarts + 1):
            if self.next_victim("redis", number) is None:
                return
            time.sleep(self.rng.uniform(0.5, self.o.kill_delay_max_s))
            in_flight = self.in_flight_ids(agent=None)
            at = time.time()
            self.stack.kill_redis()
            probe: list[Sent] = []
            sender = threading.Thread(target=self._probe, args=(probe,), daemon=True, name="probe")
            sender.start()
            time.sleep(self.o.redis_down_s)
            self.stack.start_redis()
            back = time.time()
            sender.join(timeout=30)
            # The probe's send may still be under way: the event keeps its box, read at the end.
            event = Event("redis", at, "", in_flight, back_at=back, probe=probe)
            self.events.append(event)
            watch_end = time.monotonic() + self.o.redis_watch_s
            exited = []
            while time.monotonic() < watch_end:
                exited += self.stack.check_exits(restart=False)
                time.sleep(0.25)
            exited += self.stack.check_exits(restart=False)
            event.until = time.time()
            for gone in exited:
                self._restart(gone.name)
            sent = probe[0] if probe else None
            answer = ("no answer within 30 s" if sent is None else
                      f"send raised {sent.error[:120]}" if sent.error else "accepted")
            self.injected["redis_restarts"] += 1
            self.say(f"redis {number}/{self.o.redis_restarts}: down {back - at:.1f} s with "
                     f"{len(in_flight)} turn(s) active; message while down: {answer}; "
                     f"exited: {', '.join(g.name for g in exited) or 'none'}")

    def redis_freezes(self) -> None:
        """Redis stopped with SIGSTOP (hung: connections stay open, nothing answers) for
        ``redis_freeze_s`` with turns in flight, a message sent meanwhile; then SIGCONT."""
        for number in range(1, self.o.redis_freezes + 1):
            if self.next_victim("redis freeze", number) is None:
                return
            in_flight = self.in_flight_ids(agent=None)
            at = time.time()
            self.stack.freeze_redis()
            probe: list[Sent] = []
            sender = threading.Thread(target=self._probe, args=(probe,), daemon=True, name="probe")
            try:
                sender.start()
                time.sleep(self.o.redis_freeze_s)
            finally:
                self.stack.thaw_redis()
            back = time.time()
            sender.join(timeout=30)
            event = Event("redis-freeze", at, "", in_flight, back_at=back, probe=probe)
            self.events.append(event)
            exited = self.stack.check_exits(restart=False)
            event.until = time.time()
            for gone in exited:
                self._restart(gone.name)
            self.injected["redis_freezes"] += 1
            sent = probe[0] if probe else None
            answer = ("no answer within 30 s" if sent is None else
                      f"send raised {sent.error[:120]}" if sent.error else
                      f"answered in {(sent.finished_at or sent.at) - sent.at:.1f} s")
            self.say(f"redis freeze {number}/{self.o.redis_freezes}: stopped {back - at:.1f} s with "
                     f"{len(in_flight)} turn(s) active; message meanwhile: {answer}; exited: "
                     f"{', '.join(g.name for g in exited) or 'none'}")

    def db_drops(self) -> None:
        """Every connection to the database terminated by the server (what a failover or a
        PgBouncer restart does), with turns in flight: none of them may fail for it."""
        if self.planned["db_drops"] == 0:
            return
        for number in range(1, self.planned["db_drops"] + 1):
            if self.next_victim("db drops", number) is None:
                return
            time.sleep(self.rng.uniform(0.2, self.o.kill_delay_max_s))
            in_flight = self.in_flight_ids(agent=None)
            at = time.time()
            terminated = self.stack.terminate_db_connections()
            self.events.append(Event("db-drop", at, "", in_flight))
            self.injected["db_drops"] += 1
            self.say(f"db drop {number}/{self.planned['db_drops']}: {terminated} connection(s) "
                     f"terminated with {len(in_flight)} turn(s) in flight")
            time.sleep(2.0)

    def _probe(self, out: list[Sent]) -> None:
        from django.db import connection

        time.sleep(0.3)
        try:
            out.append(self.send("redis-down"))
        finally:
            connection.close()

    def _restart(self, name: str) -> None:
        if name.startswith("beat"):
            self.stack.start_beat()
        else:
            self.stack.start_worker(int(name[len("chaos"):].split("g")[0]), wait=False)

    # -- settling -----------------------------------------------------------------------------------
    def wait_settled(self, ids: list[int] | None = None, *, timeout: float) -> bool:
        """Until no trace (or none of ``ids``) is queued or running, at most ``timeout`` s."""
        from traces.models import Trace

        deadline = time.monotonic() + timeout
        while True:
            self.stack.check_exits()
            rows = Trace.objects.filter(status__in=Trace.ACTIVE)
            if ids is not None:
                rows = rows.filter(pk__in=ids)
            if not rows.exists():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)

    def play(self) -> dict[str, Any]:
        self.watch.start()
        try:
            self.faults()
            self.kills()
            self.sigterms()
            self.redis_restarts()
            self.redis_freezes()
            self.db_drops()
            self.say(f"settling: waiting up to {self.o.settle_s:g} s for every turn to end")
            settled_at = time.monotonic()
            settled = self.wait_settled(timeout=self.o.settle_s)
            self.say("settled" if settled else "not settled: the rest counts as stuck")
        finally:
            self.watch.stop()
        figures = collect(sends=self.sends, events=self.events, server=self.server,
                          exits=self.stack.exits, observed=self.watch.seen)
        figures["settle_s"] = round(time.monotonic() - settled_at, 1)
        figures["injections"] = {kind: {"planned": planned, "injected": self.injected[kind]}
                                 for kind, planned in self.planned.items()}
        return figures


HARNESS_APPLICATION = "chaos-harness"


def configure_django(env: dict[str, str]) -> None:
    """Django in this process, on the stack's database and Redis. Its own log stays quiet
    below errors: while Redis is down, every announcement of a sent message warns with a
    traceback, which says nothing the figures do not (the workers log in full, to files)."""
    os.environ.update(env)
    os.environ["LOG_LEVEL"] = "ERROR"
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        # Named, so that dropping the stack's connections spares the harness's own.
        os.environ["DATABASE_URL"] += f"?application_name={HARNESS_APPLICATION}"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)


def run_one(options: Options, workdir: Path, say: Any = print) -> dict[str, Any]:
    """The whole run for ``options.db``; returns its figures (``options`` and timings included).
    Everything it starts is stopped before it returns, however it returns."""
    stack = ChaosStack(db=options.db, workdir=workdir, workers=options.workers, threads=options.threads,
                       say=say)
    server = FakeModelServer(latency_s=options.latency_s, tool_latency_s=options.tool_latency_s,
                             fault_rate=options.fault_rate, seed=options.seed)
    began = time.monotonic()
    atexit.register(stack.stop)
    # The hard stop: past the time limit and a grace, everything is killed and the run fails.
    watchdog = threading.Timer(options.time_limit_s + 90, _hard_stop, args=(stack, say))
    watchdog.daemon = True
    watchdog.start()
    try:
        env = stack.prepare()
        configure_django(env)
        server.start()
        world = world_seed(server.url)
        stack.start_processes()
        say(f"[chaos {options.db}] stack up in {time.monotonic() - began:.1f} s: Redis on port "
            f"{stack.redis_port}, {options.workers} workers x {options.threads} threads, beat, "
            f"model at {server.url}; logs in {stack.logs}")
        chaos = ChaosRun(options, stack, server, world, say=say)
        figures = chaos.play()
    finally:
        watchdog.cancel()
        stack.stop()
        with contextlib.suppress(Exception):
            server.stop()
        if not options.keep:
            stack.remove_workdir()
    figures["db"] = options.db
    figures["options"] = asdict(options)
    figures["elapsed_s"] = round(time.monotonic() - began, 1)
    figures["model_requests"] = dict(server.requests)
    return figures


def _hard_stop(stack: ChaosStack, say: Any) -> None:
    say("[chaos] the run went past its time limit: stopping everything")
    stack.stop()
    os._exit(3)
