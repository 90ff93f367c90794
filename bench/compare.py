"""Compare two runs: server time and bytes of the compare page (and of the REST endpoint) for two
generated traces of 1,000 and 10,000 steps that differ at 70 % of their length (a tool call's
arguments), payloads of 2,000 characters each.

    python -m bench.compare            # print the table
    python -m bench.compare --check    # and exit 1 if a target is missed

Server time is measured through Django's full request stack (middleware, auth, session, view,
template) with the test client, so no network is included. Target: the 10,000-step pair's page
in <= 500 ms of server time (p50) and <= 1 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from django.test.utils import setup_test_environment
from django.urls import reverse

from bench import _measure, _profile
from bench._measure import timed_get
from bench.world import bench_world  # configures Django on a scratch database
from traces.models import StepPayload
from traces.sample import make_sample_trace

SIZES = (1_000, 10_000)
RUNS = 11
PAGE_MS_LIMIT = 500.0
PAGE_BYTES_LIMIT = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)
    _measure.print_machine()
    setup_test_environment()
    world = bench_world()
    user, conversation, client = world.user, world.conversation, world.client
    api = world.api_client("traces:read")

    print(f"{'steps':>7}  {'what':<26} {'p50 ms':>8} {'p90 ms':>8} {'CPU ms':>8} {'bytes':>10}")
    ok = True
    figures = {}
    for steps in SIZES:
        started = time.perf_counter()
        a = make_sample_trace(conversation=conversation, user=user, steps=steps)
        b = make_sample_trace(conversation=conversation, user=user, steps=steps)
        # A tool call's arguments (an even step) differ at 70 % of the run.
        at = (steps * 7 // 10) // 2 * 2
        changed = json.dumps({"kind": "arguments", "seq": at, "text": "y" * 2_000})
        StepPayload.objects.filter(step__trace=b, step__seq=at, kind="arguments").update(
            content=changed, size=len(changed))
        build_s = time.perf_counter() - started
        query = f"?a={a.uuid}&b={b.uuid}"
        rows = [
            ("page", reverse("trace_compare") + query, client),
            ("REST /api/v1/traces/compare", "/api/v1/traces/compare" + query, api),
        ]
        with _profile.profiled(f"compare-{steps}", {"bench": os.getpid()}, args.profile):
            for what, url, who in rows:
                p50, p90, body, cpu = timed_get(who, url, runs=RUNS if what == "page" else 5)
                size = len(body)
                print(f"{steps:>7}  {what:<26} {p50:>8.1f} {p90:>8.1f} {cpu:>8.1f} {size:>10,}")
                figures[f"{steps:,} steps, {what}: CPU ms per request"] = cpu
                if what == "page":
                    assert f"Step {at}: tool call calculator".encode() in body, "the divergence was not found"
                    if steps == 10_000 and (p50 > PAGE_MS_LIMIT or size > PAGE_BYTES_LIMIT):
                        ok = False
        print(f"{'':>7}  (two traces generated in {build_s:.1f} s; first divergence at step {at})")
    verdict = "met" if ok else "MISSED"
    print("  (CPU ms: median CPU time of this process per request: the whole request stack, in process)")
    _measure.record("compare", figures)
    print(f"\ntarget: 10,000-step pair's page <= {PAGE_MS_LIMIT:.0f} ms server time (p50) and "
          f"<= {PAGE_BYTES_LIMIT // 1024 // 1024} MB: {verdict}")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
