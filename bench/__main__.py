"""Run every shipped benchmark in turn (``make bench``); ``--check`` fails on a missed target.

    python -m bench [--check] [--update-baseline] [--tolerance 0.2] [--profile DIR] [name ...] [-- ARGS]

Names: loop (loop overhead vs LangGraph), turns (50 concurrent turns in one worker),
live (step committed -> websocket frame), inspector (big traces), chat (send -> first token
painted in a real browser), costs (the costs page over 1,000,000 steps), mcp (an MCP tool call
over HTTP and stdio vs a built-in tool, and discovery of a 200-tool server), hostile (a megabyte
of hostile model output through the parser, sanitizer and scrubbers; hostile routing patterns),
api (200 streaming completions at once through the OpenAI-compatible API, beside the chat's path),
otel (what exporting spans costs a turn), compare (the compare page for two 10,000-step traces
that differ at step 7,000), fork (a fork at step 5,000 of a 10,000-step turn), gateway
(``/v1/chat/completions`` beside LiteLLM's proxy at 1 to 200 concurrent, both modes), pages
(home, a conversation, the trace list, the inspector and the costs page on a team with 10,000
traces: server time, CPU and queries per page), intake (chat messages accepted per second
while the worker is busy).

Every benchmark prints the machine's load at start and its CPU per unit of work beside its
times, and reports its headline CPU figures; at the end this prints what moved further than the
tolerance from ``bench/baseline.json``. ``--update-baseline`` writes this run's figures into it
(``make bench-baseline``; each benchmark that ran replaces its entry). ``--profile DIR`` writes
py-spy flame graphs of the measured processes into DIR (``make bench-profile``). Arguments after
``--`` go to every benchmark run (``python -m bench gateway -- --levels 1,10``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import _measure, _profile

BENCHES = {
    "loop": "bench.loop_overhead",
    "turns": "bench.turns_concurrency",
    "live": "bench.live_latency",
    "inspector": "bench.inspector",
    "chat": "bench.chat_latency",
    "costs": "bench.costs",
    "mcp": "bench.mcp_overhead",
    "hostile": "bench.hostile_input",
    "api": "bench.api_latency",
    "otel": "bench.otel_export",
    "compare": "bench.compare",
    "fork": "bench.fork",
    "gateway": "bench.gateway",
    "pages": "bench.pages",
    "intake": "bench.intake",
}


def _commit() -> str:
    """The commit measured, saying so when the tree had changes on top of it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_measure.ROOT,  # noqa: S607
                              capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],  # noqa: S607
                                 cwd=_measure.ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    changed_files = [line for line in changed.splitlines() if not line.endswith("bench/baseline.json")]
    return f"{head} with uncommitted changes" if changed_files else head


def summary(results: list[dict], tolerance: float) -> None:
    baseline = _measure.load_baseline()
    flagged, unbased = [], []
    for result in results:
        _, moved = _measure.comparison(result["bench"], result["cpu"], baseline, tolerance=tolerance,
                                       speed_ms=result.get("speed_ms"))
        flagged += moved
        base = ((baseline.get("benches") or {}).get(result["bench"]) or {}).get("cpu") or {}
        unbased += [f"{result['bench']}: {name}" for name in result["cpu"] if name not in base]
    print(f"\n== CPU per unit of work against bench/baseline.json (tolerance ±{tolerance:.0%})")
    if not results:
        print("no figures were reported")
        return
    for line in flagged:
        print(f"  MOVED {line}")
    benches = baseline.get("benches") or {}
    busy = [(r["bench"], note) for r in results
            if (note := _measure.load_note(r["machine"], (benches.get(r["bench"]) or {}).get("machine")))]
    if busy and flagged:
        print(f"  {busy[0][1]} (busy or unlike the baseline: {', '.join(name for name, _ in busy)})")
    compared = sum(len(r["cpu"]) for r in results) - len(unbased)
    if compared and not flagged:
        print(f"  nothing moved further than ±{tolerance:.0%} ({compared} figures compared)")
    if unbased:
        print(f"  {len(unbased)} figure(s) without a baseline yet (make bench-baseline records them)")


def main(argv: list[str]) -> int:
    passed: list[str] = []
    if "--" in argv:
        argv, passed = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="name")
    parser.add_argument("--check", action="store_true", help="exit 1 when a benchmark misses its target")
    parser.add_argument("--update-baseline", action="store_true",
                        help="write this run's CPU figures into bench/baseline.json")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="flag figures further than this from the baseline (default: the baseline's, 0.2)")
    parser.add_argument("--profile", metavar="DIR", help="write py-spy flame graphs into DIR")
    args = parser.parse_args(argv)
    names = args.names or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
        return 2
    tolerance = args.tolerance if args.tolerance is not None else float(
        _measure.load_baseline().get("tolerance", _measure.TOLERANCE))
    handle, results_path = tempfile.mkstemp(prefix="agentsite-bench-", suffix=".jsonl")
    os.close(handle)
    env = {**os.environ, _measure.RESULTS_ENV: results_path}
    if args.profile:
        env[_profile.PROFILE_ENV] = str(Path(args.profile).resolve())
    failed = []
    try:
        for name in names:
            module = BENCHES[name]
            if importlib.util.find_spec(module) is None:
                print(f"== {name}: not available")
                continue
            print(f"\n== {name} ({module})", flush=True)
            # Each in its own process: they configure Django and event loops differently.
            command = [sys.executable, "-m", module, *(["--check"] if args.check else []), *passed]
            if subprocess.call(command, env=env):  # noqa: S603
                failed.append(name)
        results = _measure.read_results(Path(results_path))
    finally:
        os.unlink(results_path)
    summary(results, tolerance)
    if args.update_baseline and results:
        written = _measure.write_baseline(results, commit=_commit())
        print(f"bench/baseline.json updated for: {', '.join(written)} (commit it on purpose)")
    if failed:
        print(f"\nmissed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
