"""Benchmark (b): concurrent turns in ONE worker process.

    python -m bench.turns_concurrency                # 50 turns, 2 s per model request
    python -m bench.turns_concurrency --check        # exit 1 unless all complete within 2x
    python -m bench.turns_concurrency --turns 100 --concurrency 100 --latency 1
    python -m bench.turns_concurrency --profile var/profile  # flame graphs of the worker and sender

Starts a Redis (the embedded one, unless REDIS_URL is set), a scratch database (SQLite unless
DATABASE_URL is set) and one Celery worker with the thread pool. Each turn asks the demo model
"What is 17 * 23?": two model requests (the tool call, then the answer), each waiting
``--latency`` seconds, with a calculator call between them, all recorded as steps and announced
on the Redis channel layer as in production. A warm-up turn runs first; then one turn alone,
then ``--turns`` turns sent at once, each in its own conversation.

Reported: the single turn's time, every concurrent turn's time (from sending to the trace's
end), and the total wall time of the batch (first send to last end); the worker's CPU per turn
and this process's CPU per message sent (``turn_start``), compared with ``bench/baseline.json``.
Target: the batch's wall time is at most twice the single turn's.
"""

from __future__ import annotations

import argparse
import atexit
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import _measure, _profile
from bench._measure import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is 17 * 23?"
ANSWER = "17 × 23 = 391."
TARGET_RATIO = 2.0


def start_redis(var: Path):
    from agentsite.processes import EmbeddedRedis, Printer, free_port

    server = EmbeddedRedis(port=free_port(), data_dir=var / "redis")
    log = open(var / "redis.log", "w")  # noqa: SIM115 - closed at exit
    server.start(Printer(log, color=False))
    server.wait_ready()
    return server, log


def start_worker(var: Path, concurrency: int) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "CELERY_WORKER_CONCURRENCY": str(concurrency)}
    env.pop("CHANNEL_LAYER_IN_MEMORY", None)  # the worker announces on Redis, as in production
    log_path = var / "worker.log"
    process = subprocess.Popen(  # noqa: S603 - our own command line
        [sys.executable, "-m", "celery", "-A", "agentsite", "worker", "-Q", "turns",
         "-P", "threads", "-c", str(concurrency), "-n", f"bench-{os.getpid()}@%h",
         "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        cwd=ROOT, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
        start_new_session=True)
    deadline = time.monotonic() + 60
    while "ready" not in _tail(log_path) and "concurrency" not in _tail(log_path):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the worker did not start:\n{_tail(log_path)}")
        time.sleep(0.1)
    time.sleep(0.5)  # past the banner: consuming
    return process, log_path


def _tail(path: Path) -> str:
    try:
        return path.read_text()[-4000:]
    except OSError:
        return ""


def setup_data(latency: float, conversations: int):
    from django.contrib.auth import get_user_model

    from agents.models import Agent, Provider, Tool
    from agents.runtime.builtin import CalculatorTool
    from agents.turns.services import conversation_create
    from agentsite.models import Membership, Team

    team = Team.objects.create(name="Bench team")
    user = get_user_model().objects.create_user(username=f"bench-{os.getpid()}", password="x" * 12)
    membership = Membership.objects.create(team=team, user=user, role=Membership.Role.OWNER)
    provider = Provider.objects.create(team=team, name="Demo (bench)", kind="demo",
                                       options={"request_latency_s": latency})
    tool = Tool.objects.create(team=team, name="calculator", kind="builtin",
                               description=CalculatorTool.description,
                               parameters=CalculatorTool.parameters)
    agent = Agent.objects.create(team=team, name="Bench agent", provider=provider, model="demo")
    agent.tools.set([tool])
    return membership, [conversation_create(membership=membership, agent=agent) for _ in range(conversations)]


def run_batch(membership, conversations, *, timeout: float) -> list:
    from agents.turns.services import turn_start
    from traces.models import Trace

    started, cpu = time.monotonic(), time.process_time()
    traces = [turn_start(conversation=c, membership=membership, text=QUESTION) for c in conversations]
    run_batch.sending_s = time.monotonic() - started
    run_batch.sending_cpu_s = time.process_time() - cpu
    ids = [t.pk for t in traces]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Trace.objects.filter(pk__in=ids, status__in=Trace.ACTIVE).exists():
            break
        time.sleep(0.05)
    return list(Trace.objects.filter(pk__in=ids).order_by("id"))


def seconds(trace) -> float:
    return (trace.finished_at - trace.created_at).total_seconds() if trace.finished_at else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=None, help="worker threads (default: --turns)")
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per model request")
    parser.add_argument("--check", action="store_true", help=f"exit 1 unless ratio <= {TARGET_RATIO}")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)
    _measure.print_machine()
    concurrency = args.concurrency or args.turns

    from bench._django import setup_django

    if not os.environ.get("AGENTSITE_VAR_DIR"):
        scratch = tempfile.mkdtemp(prefix="agentsite-bench-turns-")
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        os.environ["AGENTSITE_VAR_DIR"] = scratch
    # As in production: no query log, no debug pages.
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    var = Path(os.environ["AGENTSITE_VAR_DIR"])
    redis_server = log = None
    if not os.environ.get("REDIS_URL"):
        redis_server, log = start_redis(var)
        os.environ["REDIS_URL"] = redis_server.url
    worker = None
    try:
        setup_django()
        from agentsite.celery import app

        app.conf.broker_url = os.environ["REDIS_URL"]
        membership, conversations = setup_data(args.latency, args.turns + 2)
        worker, worker_log = start_worker(var, concurrency)
        timeout = 60 + args.latency * 10

        warm = run_batch(membership, conversations[:1], timeout=timeout)
        single = run_batch(membership, conversations[1:2], timeout=timeout)[0]
        with _profile.profiled("turns", {"worker": worker.pid, "sender": os.getpid()}, args.profile):
            cpu_before = cpu_seconds(worker.pid)
            batch = run_batch(membership, conversations[2:], timeout=timeout)
            cpu = cpu_seconds(worker.pid) - cpu_before

        done = [t for t in warm + [single] + batch if t.status == "completed" and t.answer == ANSWER]
        durations = sorted(seconds(t) for t in batch)
        wall = (max(t.finished_at for t in batch if t.finished_at)
                - min(t.created_at for t in batch)).total_seconds()
        ratio = wall / seconds(single)
        completed = sum(1 for t in batch if t in done)
        print(f"worker: 1 process, thread pool, concurrency {concurrency}; "
              f"demo model at {args.latency:g} s per request (2 requests and 1 tool call per turn)")
        print(f"single turn:          {seconds(single):6.2f} s  (worker-side {single.duration_ms / 1000:.2f} s, "
              f"{single.step_count} steps)")
        print(f"{args.turns} turns at once:    {wall:6.2f} s total wall time; {completed}/{len(batch)} completed")
        print(f"  sending:            {run_batch.sending_s:.2f} s for the {len(batch)} messages (turn_start, "
              "in this process, while the worker already runs the first turns); "
              f"{run_batch.sending_cpu_s / len(batch) * 1000:.1f} ms of CPU per message")
        print(f"  per turn:           min {durations[0]:.2f} s, median {statistics.median(durations):.2f} s, "
              f"p90 {durations[int(len(durations) * 0.9) - 1]:.2f} s, max {durations[-1]:.2f} s")
        print(f"  worker CPU:         {cpu:.2f} s for the batch, {cpu / len(batch) * 1000:.0f} ms per turn")
        print(f"ratio (batch wall / single turn): {ratio:.2f}  (target <= {TARGET_RATIO:g})")
        _measure.record("turns", {"worker CPU ms per turn": cpu / len(batch) * 1000,
                                  "turn_start CPU ms per message": run_batch.sending_cpu_s / len(batch) * 1000})
        if completed != len(batch):
            for trace in batch:
                if trace not in done:
                    print(f"  trace {trace.pk}: {trace.status} {trace.answer!r} {trace.error}")
            print(f"FAILED: {len(batch) - completed} turns did not complete; worker log: {worker_log}")
            return 1
        if args.check and ratio > TARGET_RATIO:
            print("FAILED: the batch took more than twice a single turn")
            return 1
        return 0
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
        if redis_server is not None:
            redis_server.stop(timeout=5)
            log.close()


if __name__ == "__main__":
    sys.exit(main())
