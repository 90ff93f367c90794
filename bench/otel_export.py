"""What exporting a turn's spans costs the turn: nothing it waits for, whatever the receiver does.

    python -m bench.otel_export [--check] [--turns 20]

Turns run in this process one after another (``turn_run``, as a worker runs them, on the
offline demo model at zero latency, with the calculator: three steps and a trajectory state
each), against an embedded Redis and a scratch SQLite database, in four settings:

* ``off``: the team has no exporter (the check that finds none is all a step pays);
* ``fast``: an OTLP/HTTP receiver on loopback that answers at once;
* ``slow``: one that answers each request after 5 s;
* ``down``: an endpoint where nothing listens (connection refused).

Each turn is timed from ``turn_run``'s call to its return. Target: with the receiver slow or
down, the median turn takes at most 10 % (or 5 ms) longer than with a receiver that answers at
once: what the receiver does never reaches the turn. What export itself costs a turn is printed
beside (``fast`` against ``off``): the export thread's reads and span building, in the worker's
process. At zero model latency a turn is pure CPU, so that thread's time shows in full; a turn
that waits on a model server hides it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.conf import settings

from agentsite.processes import free_port
from bench import (
    _django,
    _measure,
    _profile,
    _redis,  # an embedded Redis, before Django reads REDIS_URL
)
from bench.world import bench_world  # configures Django on a scratch database

# isort: split
from agents.chat.services import conversation_create
from agents.models import Tool
from agents.runtime.builtin import CalculatorTool
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from traces.export import config as export_config
from traces.export import pipeline
from traces.models import TraceExporter

SLOW_S = 5.0
LIMIT_RATIO = 1.10
LIMIT_MS = 5.0


class _Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.requests = 0
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests += 1
        time.sleep(self.server.delay_s)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--turns", type=int, default=20)
    _profile.add_profile_argument(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # the receivers are on loopback
    settings.OTEL_EXPORT_DELAY_MS = 100
    world = bench_world()
    team, agent, membership = world.team, world.agent, world.membership
    agent.tools.set([Tool.objects.create(team=team, name="calculator", kind="builtin", policy="allow",
                                         description=CalculatorTool.description,
                                         parameters=CalculatorTool.parameters)])

    cpu_ms: dict[str, float] = {}

    def turns() -> list[float]:
        took = []
        cpu = 0.0
        for index in range(args.turns + 2):
            if index == 2:  # after the two warm-up turns
                cpu = time.process_time()
            conversation = conversation_create(membership=membership, agent=agent)
            trace = turn_start(conversation=conversation, membership=membership,
                               text=f"What is {index} * 7?")
            started = time.perf_counter()
            status = turn_run(trace.pk)
            elapsed = (time.perf_counter() - started) * 1000
            if status != "completed":
                raise SystemExit(f"a turn ended {status}")
            if index >= 2:  # two warm-up turns
                took.append(elapsed)
        turns.cpu_ms = (time.process_time() - cpu) / args.turns * 1000
        return took

    def with_endpoint(endpoint: str | None) -> list[float]:
        pipeline.PIPELINE.flush(2.0)
        TraceExporter.objects.filter(team=team).delete()
        if endpoint is not None:
            TraceExporter.objects.create(team=team, endpoint=endpoint)
        export_config.forget()
        pipeline.forget_configured()
        return turns()

    results: dict[str, list[float]] = {}
    with _profile.profiled("otel", {"bench": os.getpid()}, args.profile):
        results["off"] = with_endpoint(None)
        cpu_ms["off"] = turns.cpu_ms
        fast = _Receiver(0.0)
        threading.Thread(target=fast.serve_forever, daemon=True).start()
        results["fast"] = with_endpoint(f"http://127.0.0.1:{fast.server_address[1]}")
        cpu_ms["fast"] = turns.cpu_ms
        pipeline.PIPELINE.flush(10.0)
        slow = _Receiver(SLOW_S)
        threading.Thread(target=slow.serve_forever, daemon=True).start()
        results["slow"] = with_endpoint(f"http://127.0.0.1:{slow.server_address[1]}")
        cpu_ms["slow"] = turns.cpu_ms
        results["down"] = with_endpoint(f"http://127.0.0.1:{free_port()}")
        cpu_ms["down"] = turns.cpu_ms

    base = statistics.median(results["fast"])
    print(f"{args.turns} turns each (calculator: 3 steps), turn_run wall time in ms")
    print(f"{'setting':<8} {'median':>8} {'p95':>8} {'max':>8} {'vs off':>8} {'CPU/turn':>9}")
    missed = []
    for name, took in results.items():
        median = statistics.median(took)
        p95 = sorted(took)[max(int(len(took) * 0.95) - 1, 0)]
        ratio = median / statistics.median(results["off"])
        print(f"{name:<8} {median:8.1f} {p95:8.1f} {max(took):8.1f} {ratio:7.2f}x {cpu_ms[name]:9.1f}")
        if name in ("slow", "down") and median > max(base * LIMIT_RATIO, base + LIMIT_MS):
            missed.append(name)
    print(f"fast receiver: {fast.requests} request(s); {pipeline.PIPELINE.exported} span(s) built in "
          f"{pipeline.PIPELINE.build_s * 1000:.0f} ms of the export thread, "
          f"{pipeline.PIPELINE.dropped} job(s) dropped")
    if missed:
        print(f"missed: the turn was slower with the receiver {', '.join(missed)} than fast")
    print("  (CPU/turn: this process's CPU ms per measured turn, export thread included)")
    _measure.record("otel", {f"export {name}: CPU ms per turn": cpu_ms[name] for name in ("off", "fast")})
    print(f"target: slow/down median <= fast median x {LIMIT_RATIO} (or + {LIMIT_MS:g} ms): "
          f"{'met' if not missed else 'missed'}")
    sys.stdout.flush()
    _redis.stop()  # os._exit skips the exit hooks
    _django.cleanup()
    os._exit(1 if (missed and args.check) else 0)  # the slow receiver's threads still sleep


if __name__ == "__main__":
    sys.exit(main())
