"""agentsite's ``POST /v1/chat/completions`` beside LiteLLM's proxy: the same machine, the same
load client, one run.

    python -m bench.gateway [--check] [--database sqlite|postgres] [--levels 1,10,50,200]
                            [--requests N] [--modes non-streamed,streamed] [--profile DIR]

agentsite: the whole product (``agentsite.stack.Stack``: embedded Redis, one daphne, one Celery
worker with the thread pool, ``--worker-threads`` threads, and beat) with production settings
(``DEBUG=0``, a throwaway ``SECRET_KEY``, plain HTTP on loopback), one demo agent at zero latency
without tools and an API key of alice's; every request is a full turn (trace recorded, costs
priced, live announcements). On a file SQLite database, or with ``--database postgres`` on a
throwaway database on 127.0.0.1:5432 (user postgres, trust auth), owned by a throwaway role
whose ``CONNECTION LIMIT`` (``--pg-connections``, 30) keeps the benchmark from taking the shared
server's connections: a connection refused there is an error of agentsite's. Both are dropped
at the end, failure or not.

LiteLLM (``bench._litellm``): its proxy 1.108.7, one process, one model whose ``mock_response``
is the text the demo model answers the benchmark's question (learnt from agentsite's first
answer). When it cannot be installed or started, this says so and compares against LiteLLM's
figures of the run recorded in ``bench/baseline.json``.

The load client (httpx, one ``AsyncClient`` per run with a pool of ``concurrent`` connections,
``concurrent`` senders each sending its next request as soon as the last one ended, the same
code for both): for each mode (non-streamed; streamed, ``"stream": true``) and each level of
concurrency, ``--requests`` requests (default max(100, 2 x concurrent)) to each target, the two
alternating (which goes first changes at each level), after a warm-up, each run starting once
the servers are idle. Measured:

* requests/s: requests answered without error over the run's wall time;
* latency p50 and p99 (send to the whole answer, or to ``data: [DONE]``) of those; streamed,
  also the first text's p50;
* errors: an answer other than 200, an answer without text, an ``error`` event, a stream that
  ends without ``[DONE]``, a connection error or a timeout (``--timeout``); the first reasons
  are printed;
* CPU milliseconds per request (all requests sent) of the server side, from ``/proc/<pid>/stat``
  before and after: agentsite's web process and worker each (its Redis in the details),
  LiteLLM's process and its children; this client's own beside, to show it is not the limit.

Target (issue 29): agentsite's requests/s at least 0.5x LiteLLM's at every level, in both modes,
with no error of agentsite's. ``--check`` exits 1 when it is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentsite.stack import Stack
from bench import _litellm, _measure, _profile
from bench._load import QUESTION, Run, Target, client_for, load, text_of, wait_idle
from bench._postgres import PG_ADMIN_URL, ConnectionWatch, postgres_database
from tests.cached_server import stop_on_signals

AGENT = "Bench"
KEY = "bench"
LEVELS = (1, 10, 50, 200)
MODES = ("non-streamed", "streamed")
TARGET_RATIO = 0.5
WORKER_THREADS = 200
TIMEOUT_S = 300.0
WARMUP_REQUESTS = 20
WARMUP_CONCURRENT = 10
PG_CONNECTIONS = 30
ERROR_REASONS = 3  # distinct reasons printed per run
# The last line of a traceback in the stack's log ("   web | django.db.utils.OperationalError: ...").
EXCEPTION_LINE = re.compile(r"^\s*(?P<process>web|worker|beat)\s*\|\s*"
                            r"(?P<text>[A-Za-z_][\w.]*(?:Error|Exception|Interrupted|Timeout)\b.*)$")


@dataclass
class Reference:
    """LiteLLM's figures of an earlier run (``bench/baseline.json``), when it cannot run now."""

    recorded: str
    figures: dict[str, float] = field(default_factory=dict)

    def get(self, what: str, mode: str, concurrent: int) -> float:
        return self.figures.get(_figure("LiteLLM", what, mode, concurrent), float("nan"))


def _figure(side: str, what: str, mode: str, concurrent: int) -> str:
    return f"{side} {what}, {mode}, {concurrent} concurrent"


# -- the two servers -----------------------------------------------------------------------------
def agentsite_target(stack: Stack) -> Target:
    ids = stack.seed({"agents": [{"name": AGENT, "tools": [], "provider_options": {}}],
                      "api_keys": [{"name": KEY, "user": "alice", "scopes": ["chat"]}]})
    return Target("agentsite", stack.url, ids["keys"][KEY], ids["slugs"][AGENT],
                  {"web": stack.pid("web"), "worker": stack.pid("worker"), "redis": stack.pid("redis")},
                  shown=("web", "worker"))


def learn_answer(target: Target) -> str:
    """The text agentsite answers the benchmark's question (LiteLLM's mock answers the same)."""
    async def ask() -> httpx.Response:
        async with client_for(target, 1, TIMEOUT_S) as client:
            return await client.post("/v1/chat/completions", json={
                "model": target.model, "messages": [{"role": "user", "content": QUESTION}]})

    answer = asyncio.run(ask())
    text = text_of(answer) if answer.status_code == 200 else ""
    if not text:
        raise SystemExit(f"agentsite did not answer the question: "
                         f"{_measure.error_reason(answer.status_code, answer.text)}")
    return text


def baseline_reference(key: str) -> Reference | None:
    benches = _measure.load_baseline().get("benches") or {}
    for name in (key, "gateway"):
        entry = benches.get(name) or {}
        if entry.get("reference"):
            return Reference(f"{entry.get('recorded', '?')} at {entry.get('commit', '?')}", entry["reference"])
    return None


# -- the report ----------------------------------------------------------------------------------
def _num(value: float, digits: int = 1) -> str:
    if value != value:  # NaN
        return "-"
    return f"{value:,.{digits}f}"


def _ms(value: float) -> str:
    if value != value:
        return "-"
    return f"{value / 1000:,.1f} s" if value >= 10_000 else f"{value:,.0f} ms"


def _side(rps: float, p50: float, p99: float, mark: str = "") -> str:
    return f"{_num(rps)}{mark}, {_ms(p50)}, {_ms(p99)}" if rps == rps else "-"


def table(results: dict[tuple[str, int], dict[str, Run]], reference: Reference | None) -> list[list[str]]:
    header = ["mode", "conc.", "agentsite req/s, p50, p99", "first text", "LiteLLM req/s, p50, p99",
              "first text", "ratio", "CPU ms/req: agentsite (web + worker)", "LiteLLM", "errors"]
    rows = [header]
    for (mode, concurrent), runs in results.items():
        ours = runs["agentsite"]
        theirs = runs.get("LiteLLM")
        streamed = mode == "streamed"
        row = [mode, str(concurrent), _side(ours.rps, ours.latency_ms(0.5), ours.latency_ms(0.99)),
               _ms(ours.first_text_ms(0.5)) if streamed else ""]
        if theirs is not None:
            their_rps = theirs.rps
            row += [_side(their_rps, theirs.latency_ms(0.5), theirs.latency_ms(0.99)),
                    _ms(theirs.first_text_ms(0.5)) if streamed else ""]
            their_cpu = _num(theirs.server_cpu_ms())
            their_errors = f"{len(theirs.errors)}/{len(theirs.samples)}"
        elif reference is not None:
            their_rps = reference.get("req/s", mode, concurrent)
            row += [_side(their_rps, reference.get("p50 ms", mode, concurrent),
                          reference.get("p99 ms", mode, concurrent), "*"),
                    _ms(reference.get("first text p50 ms", mode, concurrent)) if streamed else ""]
            their_cpu = _num(reference.get("CPU ms/request", mode, concurrent)) + "*"
            their_errors = "*"
        else:
            their_rps = float("nan")
            row += ["-", "-" if streamed else ""]
            their_cpu, their_errors = "-", "-"
        ratio = ours.rps / their_rps if their_rps and their_rps == their_rps else float("nan")
        row += [_num(ratio, 2) + ("x" if ratio == ratio else ""),
                f"{_num(ours.server_cpu_ms())} ({_num(ours.cpu_ms('web'))} + {_num(ours.cpu_ms('worker'))})",
                their_cpu, f"{len(ours.errors)}/{len(ours.samples)}, {their_errors}"]
        rows.append(row)
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) if i < 2 else cell.rjust(width)
                 for i, (cell, width) in enumerate(zip(row, widths, strict=True))]
        print("| " + " | ".join(cells) + " |")
        if index == 0:
            print("|" + "|".join("-" * (w + 2) if i < 2 else "-" * (w + 1) + ":"
                                 for i, w in enumerate(widths)) + "|")


def describe(run: Run, names: tuple[str, ...]) -> str:
    cpu = ", ".join(f"{name} {run.cpu_ms(name):.1f}" for name in names)
    return (f"{run.target}: {len(run.samples)} requests in {run.wall_s:.1f} s, {run.rps:.1f}/s, "
            f"p50 {_ms(run.latency_ms(0.5))}, {len(run.errors)} errors; CPU ms/request: {cpu}")


def print_errors(run: Run) -> None:
    for reason, count in Counter(s.error for s in run.errors).most_common(ERROR_REASONS):
        print(f"    {run.target} {run.mode}, {run.concurrent} concurrent: {count} x {reason}")


# -- main ----------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)),
                        help="concurrency levels, comma-separated (default 1,10,50,200)")
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per level and target (default max(100, 2 x concurrent))")
    parser.add_argument("--modes", default=",".join(MODES), help="non-streamed,streamed (default both)")
    parser.add_argument("--worker-threads", type=int, default=WORKER_THREADS)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per request (default 300)")
    parser.add_argument("--pg-connections", type=int, default=PG_CONNECTIONS,
                        help="connection limit of the PostgreSQL role (default 30)")
    parser.add_argument("--pg-admin-url", default=PG_ADMIN_URL)
    parser.add_argument("--no-litellm", action="store_true",
                        help="do not start LiteLLM: compare with its figures in bench/baseline.json")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)
    args.levels = [int(level) for level in args.levels.split(",") if level.strip()]
    args.modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if not args.levels or min(args.levels) < 1 or set(args.modes) - set(MODES) or not args.modes:
        parser.error(f"--levels takes positive numbers, --modes some of {', '.join(MODES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    stop_on_signals()  # SIGTERM too ends the servers and drops the database
    load_line = _measure.print_machine()
    key = "gateway" if args.database == "sqlite" else f"gateway-{args.database}"
    executable, unavailable = None, ""
    if args.no_litellm:
        unavailable = "--no-litellm"
    else:
        try:
            executable = _litellm.prepare()
        except _litellm.Unavailable as exc:
            unavailable = f"it cannot be installed here: {str(exc).splitlines()[0]}"
    with contextlib.ExitStack() as cleanup:
        try:
            results, reference, watch, logged = run(args, cleanup, key, executable, unavailable)
        finally:
            # The teardown (servers, the PostgreSQL database) must not stop half-way at a second
            # Ctrl-C or SIGTERM: it is bounded by its own timeouts.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop_on_signals()
    return report(args, key, load_line, results, reference, watch, logged)


def run(args: argparse.Namespace, cleanup: contextlib.ExitStack, key: str, executable: Any,
        unavailable: str) -> tuple[dict[tuple[str, int], dict[str, Run]], Reference | None,
                                   ConnectionWatch | None, Counter[str]]:
    """Start both sides (their teardown goes on ``cleanup``) and measure them."""
    database_url, watch = None, None
    if args.database == "postgres":
        database_url, role = cleanup.enter_context(postgres_database(args.pg_admin_url, args.pg_connections))
        watch = ConnectionWatch(args.pg_admin_url, role)
    stack = Stack(debug=False, worker_threads=args.worker_threads, database_url=database_url)
    cleanup.callback(stack.stop)
    started = time.monotonic()
    stack.start(timeout=120)
    ours = agentsite_target(stack)
    answer = learn_answer(ours)
    print(f"agentsite: 1 daphne, 1 Celery worker ({args.worker_threads} threads), embedded Redis, "
          f"{'PostgreSQL' if database_url else 'file SQLite'}, DEBUG=0; up in "
          f"{time.monotonic() - started:.0f} s; the demo model answers {QUESTION!r} with "
          f"{len(answer)} characters", flush=True)
    targets = [ours]
    if executable is not None:
        try:
            proxy = cleanup.enter_context(_litellm.serving(executable, answer))
            targets.append(Target("LiteLLM", proxy.url, proxy.key, proxy.model,
                                  {"litellm": proxy.pid}, shown=("litellm",), tree=("litellm",)))
            print(f"LiteLLM {_litellm.VERSION}: 1 process (--num_workers 1), mock_response = the same "
                  "text", flush=True)
        except _litellm.Failed as exc:
            unavailable = f"it did not start: {exc}"
    reference = None
    if unavailable:
        reference = baseline_reference(key)
        where = (f"its figures recorded {reference.recorded} in bench/baseline.json (marked *)"
                 if reference else "nothing: bench/baseline.json has no LiteLLM figures")
        print(f"LiteLLM IS NOT RUNNING ({unavailable}); comparing against {where}", flush=True)
    if watch is not None:
        cleanup.enter_context(watch)
    results = measure(args, targets)
    return results, reference, watch, server_exceptions(stack.log_path)


def server_exceptions(log: Path) -> Counter[str]:
    """The exceptions agentsite's processes logged (the last line of each traceback): production
    error pages do not say what failed, their log does."""
    found: Counter[str] = Counter()
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return found
    for line in text.splitlines():
        match = EXCEPTION_LINE.match(line)
        if match:
            found[f"{match['process']}: {' '.join(match['text'].split())[:200]}"] += 1
    return found


def measure(args: argparse.Namespace, targets: list[Target]) -> dict[tuple[str, int], dict[str, Run]]:
    for target in targets:  # warm-up: imports, caches, connections
        for mode in args.modes:
            asyncio.run(load(target, mode, WARMUP_CONCURRENT, WARMUP_REQUESTS, args.timeout))
    results: dict[tuple[str, int], dict[str, Run]] = {}
    pids = {n: p for t in targets for n, p in t.pids.items() if n != "redis"}
    turn = 0
    with _profile.profiled("gateway", pids, args.profile, subprocesses=("litellm",)):
        for mode in args.modes:
            for concurrent in args.levels:
                requests = args.requests or max(100, 2 * concurrent)
                order = targets if turn % 2 == 0 else targets[::-1]
                turn += 1
                runs = {}
                for target in order:
                    waited = wait_idle(targets)
                    run = asyncio.run(load(target, mode, concurrent, requests, args.timeout))
                    runs[target.name] = run
                    print(f"  {mode}, {concurrent} concurrent: {describe(run, (*target.pids, 'client'))}"
                          + (f" (waited {waited:.0f} s for idle servers)" if waited > 5 else ""), flush=True)
                results[(mode, concurrent)] = runs
    return results


def report(args: argparse.Namespace, key: str, load_line: str,
           results: dict[tuple[str, int], dict[str, Run]], reference: Reference | None,
           watch: ConnectionWatch | None, logged: Counter[str]) -> int:
    print(f"\nagentsite ({'PostgreSQL' if args.database == 'postgres' else 'SQLite'}) vs LiteLLM "
          f"{_litellm.VERSION}; machine at start: {load_line}")
    print_table(table(results, reference))
    print("  (req/s: requests answered without error over the run's wall time; p50, p99 and first "
          "text p50 of those; CPU ms/req: the servers' CPU over all the run's requests; ratio: "
          "agentsite req/s / LiteLLM req/s; errors: agentsite's, LiteLLM's, of the requests sent)")
    if reference is not None:
        print(f"  * LiteLLM did not run: its figures from bench/baseline.json, recorded {reference.recorded}")
    if watch is not None:
        print(f"PostgreSQL: at most {watch.peak} connections of the benchmark's role at once "
              f"(its limit: {args.pg_connections})")
    for runs in results.values():
        for run in runs.values():
            print_errors(run)
    if logged:
        print(f"agentsite's log: {sum(logged.values())} exceptions; the most frequent:")
        for reason, count in logged.most_common(ERROR_REASONS):
            print(f"    {count} x {reason}")
    figures, their = {}, {}
    missed = []
    for (mode, concurrent), runs in results.items():
        ours = runs["agentsite"]
        for name in ("web", "worker"):
            figures[_figure("agentsite", f"{name} CPU ms/request", mode, concurrent)] = ours.cpu_ms(name)
        theirs = runs.get("LiteLLM")
        if theirs is not None:
            for what, value in (("req/s", theirs.rps), ("p50 ms", theirs.latency_ms(0.5)),
                                ("p99 ms", theirs.latency_ms(0.99)),
                                ("first text p50 ms", theirs.first_text_ms(0.5)),
                                ("CPU ms/request", theirs.server_cpu_ms())):
                if value == value:
                    their[_figure("LiteLLM", what, mode, concurrent)] = round(value, 3)
            their_rps = theirs.rps
        else:
            their_rps = reference.get("req/s", mode, concurrent) if reference else float("nan")
        ratio = ours.rps / their_rps if their_rps == their_rps and their_rps else float("nan")
        if not ratio >= TARGET_RATIO:
            missed.append(f"{mode} at {concurrent}: {_num(ratio, 2)}x")
        if ours.errors:
            missed.append(f"{mode} at {concurrent}: {len(ours.errors)} errors")
        if theirs is not None and theirs.errors:
            print(f"  note: LiteLLM had {len(theirs.errors)} errors ({mode}, {concurrent} concurrent): "
                  "its figures there are not a fair reference")
    _measure.record(key, figures, reference=their, title="agentsite's CPU per request")
    ok = not missed
    partial = (set(args.levels) != set(LEVELS) or set(args.modes) != set(MODES))
    print(f"verdict: {'PASS' if ok else 'FAIL'} (target: agentsite >= {TARGET_RATIO}x LiteLLM's requests/s "
          f"at every level in both modes, 0 errors" + ("; this run measured levels "
          f"{','.join(map(str, args.levels))}, {' and '.join(args.modes)} only" if partial else "")
          + (f"; missed: {'; '.join(missed)}" if missed else "") + ")")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: the servers were stopped", flush=True)
        sys.exit(130)
