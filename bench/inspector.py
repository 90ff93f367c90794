"""Inspector cost on big traces: server time and bytes of the trace page for generated traces of
1,000 and 10,000 steps, the trace's JSON re-sync skeleton, and one step's payload fetch.

    python -m bench.inspector            # print the table
    python -m bench.inspector --check    # and exit 1 if a target is missed

Server time is measured through Django's full request stack (middleware, auth, session, view,
template) with the test client, so no network is included. Target: the 10,000-step trace's page
in <= 200 ms of server time and <= 2 MB.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from django.test.utils import setup_test_environment
from django.urls import reverse

from bench import _measure, _profile
from bench._measure import timed_get
from bench.world import bench_world  # configures Django on a scratch database
from traces.sample import make_sample_trace

SIZES = (1_000, 10_000)
RUNS = 15
PAGE_MS_LIMIT = 200.0
PAGE_BYTES_LIMIT = 2 * 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)
    _measure.print_machine()
    setup_test_environment()
    world = bench_world()
    user, conversation, client = world.user, world.conversation, world.client

    print(f"{'steps':>7}  {'what':<22} {'p50 ms':>8} {'p90 ms':>8} {'CPU ms':>8} {'bytes':>10}")
    ok = True
    figures = {}
    for steps in SIZES:
        started = time.perf_counter()
        trace = make_sample_trace(conversation=conversation, user=user, steps=steps)
        build_s = time.perf_counter() - started
        rows = [
            ("page", reverse("trace_detail", args=[trace.uuid])),
            ("re-sync, last 50 events", reverse("trace_changes", args=[trace.uuid]) + f"?since={trace.event_seq - 50}"),
            ("next chunk of steps", reverse("trace_steps_chunk", args=[trace.uuid]) + "?after=200"),
            ("one step opened", reverse("step_detail", args=[trace.uuid, steps // 2])),
        ]
        with _profile.profiled(f"inspector-{steps}", {"bench": os.getpid()}, args.profile):
            for what, url in rows:
                p50, p90, body, cpu = timed_get(client, url, runs=5 if what.startswith("re-sync") else RUNS)
                size = len(body)
                print(f"{steps:>7}  {what:<22} {p50:>8.1f} {p90:>8.1f} {cpu:>8.1f} {size:>10,}")
                figures[f"{steps:,}-step trace, {what}: CPU ms per request"] = cpu
                if steps == 10_000 and what == "page" and (p50 > PAGE_MS_LIMIT or size > PAGE_BYTES_LIMIT):
                    ok = False
        print(f"{'':>7}  (generated in {build_s:.1f} s)")
    print("  (CPU ms: median CPU time of this process per request: the whole request stack, in process)")
    _measure.record("inspector", figures)
    verdict = "met" if ok else "MISSED"
    print(f"\ntarget: 10,000-step page <= {PAGE_MS_LIMIT:.0f} ms server time and <= {PAGE_BYTES_LIMIT // 1024 // 1024} MB: {verdict}")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
