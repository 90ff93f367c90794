"""Step committed -> websocket frame received, through the real path: the recorder writes each
step on a turn's database thread and announces it on the Redis channel layer; daphne forwards it
to a browser-like websocket client logged in to the inspector of that trace.

    python -m bench.live_latency [--check] [--rate 200] [--steps 1000]

Latency is measured per step from the moment its database write returned (the commit) to the
moment the client received the frame carrying that step; both clocks are this process's.
Target: p99 <= 50 ms at 200 steps/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from bench import _measure, _profile, _redis  # noqa: F401 - _redis: an embedded Redis, before Django reads REDIS_URL

# The frames cross processes (this one records, daphne forwards): through Redis.
os.environ["CHANNEL_LAYER_IN_MEMORY"] = "0"

# isort: split
from bench.world import bench_world  # noqa: E402 - configures Django on a scratch database

# isort: split
import websockets  # noqa: E402
from django.utils import timezone  # noqa: E402

from agents.models import Message  # noqa: E402
from agents.runtime.events import ToolStarted  # noqa: E402
from agents.turns.turn_threads import TurnDb  # noqa: E402
from agentsite.processes import daphne_command, free_port  # noqa: E402
from traces.models import Trace  # noqa: E402
from traces.record import services  # noqa: E402
from traces.record.recorder import TraceRecorder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
P99_LIMIT_MS = 50.0


def _wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - loopback
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--rate", type=float, default=200.0, help="steps per second (default 200)")
    parser.add_argument("--steps", type=int, default=1000)
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)

    web = None
    try:
        var_dir = os.environ["AGENTSITE_VAR_DIR"]
        port = free_port()
        env = {**os.environ, "AGENTSITE_VAR_DIR": var_dir, "DEBUG": "1"}
        web = subprocess.Popen(  # noqa: S603
            daphne_command(sys.executable, "127.0.0.1", port),
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        _wait_http(f"http://127.0.0.1:{port}/accounts/login/")
        with _profile.profiled("live", {"web": web.pid, "recorder": os.getpid()}, args.profile):
            return asyncio.run(_run(port, args, web.pid))
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=10)


async def _run(port: int, args: argparse.Namespace, web_pid: int) -> int:
    def prepare():
        world = bench_world()
        question = Message.objects.create(conversation=world.conversation, role="user", text="go", blocks=[])
        trace = Trace.objects.create(team=world.team, conversation=world.conversation, agent=world.agent,
                                     user=world.user, user_message=question, status=Trace.Status.RUNNING,
                                     attempts=1, started_at=timezone.now(), heartbeat_at=timezone.now())
        return trace, world.client.cookies["sessionid"].value

    trace, session = await asyncio.to_thread(prepare)
    commits: dict[int, float] = {}
    received: dict[int, float] = {}
    done = asyncio.Event()

    url = f"ws://127.0.0.1:{port}/ws/traces/{trace.uuid}/"
    headers = {"Cookie": f"sessionid={session}", "Origin": f"http://127.0.0.1:{port}"}
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        async def listen() -> None:
            async for raw in ws:
                now = time.perf_counter()
                payload = json.loads(raw)
                if payload.get("event") == "step":
                    received.setdefault(payload["step"], now)
                    if len(received) >= args.steps:
                        done.set()
                        return

        listener = asyncio.create_task(listen())
        await asyncio.sleep(0.3)  # the group subscription settles
        cpu: dict[str, float] = {}
        producer = threading.Thread(target=_produce, args=(trace, args, commits, cpu), daemon=True)
        web_cpu = _measure.cpu_seconds(web_pid)
        started = time.perf_counter()
        producer.start()
        try:
            await asyncio.wait_for(done.wait(), timeout=args.steps / args.rate + 30)
        except TimeoutError:
            pass
        elapsed = time.perf_counter() - started
        web_cpu = _measure.cpu_seconds(web_pid) - web_cpu
        listener.cancel()
        producer.join(timeout=30)

    latencies = sorted((received[s] - commits[s]) * 1000 for s in received if s in commits)
    lost = args.steps - len(latencies)
    if not latencies:
        print("no frames received")
        return 1
    p50 = statistics.median(latencies)
    p99 = latencies[max(int(len(latencies) * 0.99) - 1, 0)]
    achieved = len(commits) / elapsed if elapsed else 0
    print(f"steps: {args.steps} at {args.rate:.0f}/s requested, {achieved:.0f}/s achieved; frames received: {len(latencies)} (missing {lost})")
    print(f"commit -> frame: p50 {p50:.2f} ms, p90 {latencies[int(len(latencies) * 0.9) - 1]:.2f} ms, "
          f"p99 {p99:.2f} ms, max {latencies[-1]:.2f} ms")
    recorder_ms = cpu.get("recorder", float("nan")) / max(len(commits), 1) * 1000
    web_ms = web_cpu / max(len(latencies), 1) * 1000
    print(f"CPU: the recorder's thread {recorder_ms:.2f} ms per step (write and announce); "
          f"the web process {web_ms:.2f} ms per frame forwarded")
    _measure.record("live", {"recorder CPU ms per step": recorder_ms, "web CPU ms per frame": web_ms})
    ok = p99 <= P99_LIMIT_MS and lost == 0
    print(f"target: p99 <= {P99_LIMIT_MS:.0f} ms with no frame lost: {'met' if ok else 'MISSED'}")
    return 0 if ok or not args.check else 1


def _produce(trace, args: argparse.Namespace, commits: dict[int, float], cpu: dict[str, float]) -> None:
    """A turn's recorder in its own thread and event loop, as in a worker: one tool step per
    tick, recorded and announced exactly as a real turn records it."""
    original = services.step_record

    def timed_step_record(**kwargs):
        step = original(**kwargs)
        commits[kwargs["seq"]] = time.perf_counter()
        return step

    services.step_record = timed_step_record

    async def run() -> None:
        db = TurnDb.acquire()
        recorder = TraceRecorder(trace=trace, attempt=1, db=db)
        await recorder.start()
        began = time.thread_time()
        interval = 1.0 / args.rate
        next_at = time.perf_counter()
        for n in range(1, args.steps + 1):
            await recorder.emit(ToolStarted(iteration=n, call_id=f"call_{n}", name="noop", arguments={}))
            next_at += interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        cpu["recorder"] = time.thread_time() - began
        db.release()

    try:
        asyncio.run(run())
    finally:
        services.step_record = original


if __name__ == "__main__":
    sys.exit(main())
