"""What an MCP tool costs next to a built-in one, and what discovering a big server costs.

One trivial tool, ``add(a, b)`` returning the sum, three ways: a runtime ``FunctionTool``
(built-in), and the same function as a tool of an MCP server written with the SDK, called
through ``McpTool.execute`` (what the turn loop calls) over Streamable HTTP on loopback and over
stdio. Calls run one after another in one event loop after a warm-up, as the calls of one turn
do: the client keeps one connection per server and loop (opened by the first call, closed by
``close_connections()`` at the end of a turn), so these are calls on a kept connection; each
one's wall time is a sample. What the first call of a turn costs (opening the connection) is
measured apart. Then ``discover()`` (tools/list) of an SDK server with 200 generated tools, over
HTTP (a discovery opens its own connection).

The servers are child processes of the benchmark: the SDK app under uvicorn on 127.0.0.1 (a
port it picks), started and stopped here, exiting on its own if this process goes away; and the
same server over stdio (``--serve-stdio``), which the client itself starts when it opens a
connection. Each exits after MAX_SERVER_S in any case. The outbound policy is told to allow
loopback (127.0.0.0/8, ::1/128), as an operator would.

    python -m bench.mcp_overhead            # print the table
    python -m bench.mcp_overhead --check    # and exit 1 if a target is missed

Targets: an MCP call over HTTP on loopback adds <= 5 ms at the median over the built-in tool;
``discover()`` of a 200-tool server over HTTP takes <= 50 ms at the median. stdio is reported,
not checked (opening a stdio connection costs a process start, once per turn). The output says
where a new connection's time goes (connect and handshake, the call itself, closing), which
requests the first and the next calls of a turn make, and what the SDK client alone costs on
one open connection (the floor).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import _measure

ROOT = Path(__file__).resolve().parent.parent
HTTP_CALLS, HTTP_WARMUP = 200, 20
STDIO_CALLS, STDIO_WARMUP = 20, 2
BREAKDOWN_RUNS = {"http": 50, "stdio": 10}
FIRST_CALL_RUNS = {"http": 20, "stdio": 3}  # first calls of a turn: each on a new connection
COUNTED_CALLS = 3
DISCOVER_RUNS, DISCOVER_WARMUP = 20, 3
LIST_TOOLS = 200
BIG_CALLS = 50  # add() calls on the 200-tool server
TARGET_HTTP_ADDED_MS = 5.0
TARGET_DISCOVER_MS = 50.0
LOOPBACK = ["127.0.0.0/8", "::1/128"]
MAX_SERVER_S = 600.0  # a server child exits after this long whatever happens
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0

Sample = Callable[[int], Awaitable[None]]


# -- the servers (run in child processes) --------------------------------------------------------
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


def build_server(tools: int) -> Any:
    """An SDK server with ``add`` and ``tools - 1`` generated tools of the same small schema."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench", version="1.0")
    server.add_tool(add, name="add", description="Adds two integers.")
    for i in range(1, tools):
        server.add_tool(add, name=f"tool_{i:03d}",
                        description=f"Generated tool number {i}: adds two integers a and b.")
    return server


def _exit_with_parent() -> None:
    """Exit when the parent closes our stdin (or dies), or after MAX_SERVER_S."""
    def watch() -> None:
        deadline = time.monotonic() + MAX_SERVER_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([sys.stdin], [], [], 1.0)
            if ready and not sys.stdin.buffer.read1(4096):
                break
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def serve_http(tools: int) -> None:
    import uvicorn

    _exit_with_parent()
    logging.getLogger("mcp").setLevel(logging.WARNING)
    # proto IPPROTO_TCP, as uvicorn's own sockets: asyncio sets TCP_NODELAY only on those, and
    # without it every keep-alive answer waits ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    app = build_server(tools).streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    print(f"READY {sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])


def serve_stdio() -> None:
    # stdin is the MCP channel here; the client's shutdown closes it and the process ends.
    timer = threading.Timer(MAX_SERVER_S, os._exit, args=(0,))
    timer.daemon = True  # or the process would outlive its stdin by MAX_SERVER_S
    timer.start()
    build_server(1).run("stdio")


@contextmanager
def http_server(tools: int) -> Iterator[str]:
    """A child process serving ``tools`` tools on 127.0.0.1; yields its MCP URL."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.mcp_overhead", "--serve-http", str(tools)], cwd=ROOT,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], START_TIMEOUT_S)
        line = child.stdout.readline() if ready else ""
        if not line.startswith("READY "):
            raise RuntimeError(f"the MCP server did not start within {START_TIMEOUT_S:g} s")
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        if child.stdin:
            child.stdin.close()
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)


# -- measuring ------------------------------------------------------------------------------------
def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# This process's CPU ms per measured run, by what ``timed`` was told to call it.
CPU_MS: dict[str, float] = {}


async def timed(sample: Sample, runs: int, warmup: int, cpu: str = "") -> list[float]:
    """Milliseconds per run of ``sample(i)``, after ``warmup`` runs; with ``cpu``, the CPU per
    run goes into ``CPU_MS[cpu]``."""
    for i in range(warmup):
        await sample(-1 - i)
    samples = []
    cpu_started = time.process_time()
    for i in range(runs):
        started = time.perf_counter()
        await sample(i)
        samples.append((time.perf_counter() - started) * 1000)
    if cpu:
        CPU_MS[cpu] = (time.process_time() - cpu_started) / runs * 1000
    return samples


def caller(tool: Any) -> Sample:
    async def call(i: int) -> None:
        result = await tool.execute({"a": i, "b": 1000})
        if not result.success or result.output.strip() != str(i + 1000):
            raise RuntimeError(f"{tool.name}: unexpected result {result!r}")
    return call


def endpoints(url: str) -> tuple[Any, Any]:
    from agents.tools.mcp.client import Endpoint

    http = Endpoint(name="bench-http", transport="http", url=url)
    stdio = Endpoint(name="bench-stdio", transport="stdio", command=sys.executable,
                     args=("-m", "bench.mcp_overhead", "--serve-stdio"),
                     env={"PYTHONPATH": str(ROOT)})
    return http, stdio


def tools(http: Any, stdio: Any) -> dict[str, Any]:
    from agents.runtime.tools import FunctionTool
    from agents.tools.mcp.tool import McpTool

    schema = {"type": "object", "required": ["a", "b"],
              "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}

    async def builtin_add(arguments: dict[str, Any]) -> str:
        return str(add(int(arguments["a"]), int(arguments["b"])))

    def remote(endpoint: Any) -> Any:
        return McpTool(name=f"{endpoint.name}_add", description="Adds two integers.",
                       parameters=schema, endpoint=endpoint, remote_name="add",
                       timeout_s=CALL_TIMEOUT_S, max_bytes=100_000)

    return {"built-in": FunctionTool("add", "Adds two integers.", builtin_add, parameters=schema),
            "mcp http": remote(http), "mcp stdio": remote(stdio)}


async def breakdown(endpoint: Any, runs: int, *, listing: bool = False) -> dict[str, list[float]]:
    """Where a new connection's time goes: opening it (``connect``: a new HTTP client, or a
    new process, then the handshake), the first request on it (tools/call, with the SDK's
    tools/list for output schemas, or tools/list when ``listing``), and closing it."""
    from agents.tools.mcp.connection import connect

    request = "tools/list" if listing else "tools/call"
    parts: dict[str, list[float]] = {"connect + handshake": [], request: [], "close": []}
    for i in range(runs + 1):
        if endpoint.transport == "http" and i:
            # What connect builds first, timed alongside (same conditions) for the breakdown.
            parts.setdefault("transport", []).extend(transport_setup(1))
        t0 = time.perf_counter()
        connection = connect(endpoint, CALL_TIMEOUT_S)
        opened = await connection.__aenter__()
        t1 = time.perf_counter()
        try:
            if listing:
                await opened.client.list_tools(cache_mode="bypass")
            else:
                await opened.client.call_tool("add", {"a": i, "b": 1})
            t2 = time.perf_counter()
        except BaseException as exc:
            await connection.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        await connection.__aexit__(None, None, None)
        t3 = time.perf_counter()
        if i:  # the first is a warm-up
            parts["connect + handshake"].append((t1 - t0) * 1000)
            parts[request].append((t2 - t1) * 1000)
            parts["close"].append((t3 - t2) * 1000)
    return parts


def transport_setup(runs: int) -> list[float]:
    """Ms to build what ``connect`` builds before any request: the guarded HTTP transport
    (``GuardedBridge`` -> ``GuardedTransport`` -> ``httpx.AsyncHTTPTransport``, on the TLS
    context ``agentsite.outbound.transport.tls_context`` builds once per process)."""
    from agents.tools.mcp.transport import GuardedBridge

    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        GuardedBridge()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def reused(endpoint: Any, runs: int, warmup: int) -> list[float]:
    """The same calls made with the SDK client directly on one open connection: the floor of
    what a call on a kept connection can cost."""
    from agents.tools.mcp.connection import connect

    async with connect(endpoint, CALL_TIMEOUT_S) as connection:
        async def call(i: int) -> None:
            await connection.client.call_tool("add", {"a": i, "b": 1})
        return await timed(call, runs, warmup)


async def requests_per_call(endpoint: Any, calls: int = COUNTED_CALLS) -> list[list[str]]:
    """The HTTP requests each of the first ``calls`` calls of a turn makes (HTTP method and
    JSON-RPC method): the kept connections are closed first, so the first call opens one."""
    from agents.tools.mcp import client, connection, pool
    from agents.tools.mcp.transport import GuardedBridge

    seen: list[str] = []

    class Counting(GuardedBridge):
        async def handle_async_request(self, request: Any) -> Any:
            body = await request.aread()
            try:
                what = json.loads(body).get("method", "?") if body else ""
            except ValueError:
                what = "?"
            seen.append(f"{request.method} {what}".strip())
            return await super().handle_async_request(request)

    await pool.close_connections()
    original = connection.GuardedBridge
    connection.GuardedBridge = Counting  # type: ignore[misc]
    per_call: list[list[str]] = []
    try:
        for i in range(calls):
            before = len(seen)
            await client.call_tool(endpoint, "add", {"a": i, "b": 2},
                                   timeout_s=CALL_TIMEOUT_S, max_bytes=1000)
            per_call.append(seen[before:])
    finally:
        connection.GuardedBridge = original  # type: ignore[misc]
        await pool.close_connections()
    return per_call


async def first_calls(tool: Any, runs: int) -> list[float]:
    """Ms of the first call of a turn: the kept connections are closed before each, so each
    opens a connection (and over stdio starts the server). One warm-up run."""
    from agents.tools.mcp.pool import close_connections

    call = caller(tool)
    samples: list[float] = []
    for i in range(runs + 1):
        await close_connections()
        started = time.perf_counter()
        await call(i)
        if i:
            samples.append((time.perf_counter() - started) * 1000)
    await close_connections()
    return samples


async def process_start(runs: int = 5) -> tuple[float, float]:
    """Median ms to start a Python and exit; and to start one that imports the SDK server."""
    async def run(*args: str) -> None:
        child = await asyncio.create_subprocess_exec(sys.executable, *args, cwd=ROOT)
        await asyncio.wait_for(child.wait(), START_TIMEOUT_S)

    bare = await timed(lambda i: run("-c", "pass"), runs, 1)
    sdk = await timed(lambda i: run("-c", "import mcp.server.mcpserver"), runs, 1)
    return statistics.median(bare), statistics.median(sdk)


# -- the run --------------------------------------------------------------------------------------
async def collect(scale: float) -> dict[str, Any]:
    from django.conf import settings

    from agents.tools.mcp.client import discover
    from agents.tools.mcp.pool import close_connections

    settings.OUTBOUND_ALLOWED_NETWORKS = LOOPBACK
    for name in ("httpx", "httpx2", "mcp"):  # one INFO line per request otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    n_http, n_stdio = max(int(HTTP_CALLS * scale), 10), max(int(STDIO_CALLS * scale), 3)
    out: dict[str, Any] = {"n": {"built-in": n_http, "mcp http": n_http, "mcp stdio": n_stdio}}
    with http_server(1) as url:
        http, stdio = endpoints(url)
        runtime = tools(http, stdio)
        out["calls"] = {
            "built-in": await timed(caller(runtime["built-in"]), n_http, HTTP_WARMUP, "built-in"),
            "mcp http": await timed(caller(runtime["mcp http"]), n_http, HTTP_WARMUP, "mcp http"),
            "mcp stdio": await timed(caller(runtime["mcp stdio"]), n_stdio, STDIO_WARMUP, "mcp stdio"),
        }
        out["requests"] = await requests_per_call(http)
        out["first"] = {
            "http": await first_calls(runtime["mcp http"],
                                      max(int(FIRST_CALL_RUNS["http"] * scale), 3)),
            "stdio": await first_calls(runtime["mcp stdio"],
                                       max(int(FIRST_CALL_RUNS["stdio"] * scale), 2))}
        out["breakdown"] = {
            "http": await breakdown(http, max(int(BREAKDOWN_RUNS["http"] * scale), 5)),
            "stdio": await breakdown(stdio, max(int(BREAKDOWN_RUNS["stdio"] * scale), 3))}
        out["reused"] = {"http": await reused(http, n_http, HTTP_WARMUP),
                         "stdio": await reused(stdio, n_http, HTTP_WARMUP)}
        out["process"] = await process_start()
        await close_connections()  # the kept connections (and the stdio server) of these calls
    with http_server(LIST_TOOLS) as url:
        big, _ = endpoints(url)
        out["calls_big"] = await timed(caller(tools(big, stdio)["mcp http"]),
                                       max(int(BIG_CALLS * scale), 5), STDIO_WARMUP)
        found = await discover(big, timeout_s=CALL_TIMEOUT_S)
        if len(found.tools) != LIST_TOOLS:
            raise RuntimeError(f"discover() found {len(found.tools)} tools, not {LIST_TOOLS}")
        out["discover"] = await timed(
            lambda i: discover(big, timeout_s=CALL_TIMEOUT_S), max(int(DISCOVER_RUNS * scale), 5),
            DISCOVER_WARMUP, "discover")
        await close_connections()
        out["discover_breakdown"] = await breakdown(big, max(int(DISCOVER_RUNS * scale), 5),
                                                    listing=True)
    return out


def _row(label: str, samples: list[float], n: int | str = "") -> str:
    return (f"  {label:<34} {n!s:>5} {statistics.median(samples):>9.2f} "
            f"{pct(samples, 0.99):>9.2f}")


def _parts(parts: dict[str, list[float]]) -> str:
    return ", ".join(f"{name} {statistics.median(s):.2f}" for name, s in parts.items()
                     if name != "transport")


def report(out: dict[str, Any]) -> list[str]:
    """Prints the table; returns the targets that were missed."""
    missed: list[str] = []
    calls, n = out["calls"], out["n"]
    base = calls["built-in"]
    print("MCP overhead: add(a, b) through Tool.execute, sequential calls (ms per call; CPU: "
          "this process's, the client's, per call)")
    print(f"  {'':<34} {'n':>5} {'p50':>9} {'p99':>9} {'CPU':>9}")
    for name in ("built-in", "mcp http", "mcp stdio"):
        print(_row(name, calls[name], n[name]) + f" {CPU_MS[name]:>9.3f}")
    print(_row(f"mcp http on the {LIST_TOOLS}-tool server", out["calls_big"], len(out["calls_big"]))
          + "   (same add(); the server lists 200 tools)")
    print("Added over the built-in tool (MCP minus built-in, ms)")
    added: dict[str, tuple[float, float]] = {}
    for name in ("mcp http", "mcp stdio"):
        added[name] = (statistics.median(calls[name]) - statistics.median(base),
                       pct(calls[name], 0.99) - pct(base, 0.99))
        target = f"   (target p50 <= {TARGET_HTTP_ADDED_MS:g})" if name == "mcp http" else \
            "   (reported, no target)"
        print(f"  {name:<34} {'':>5} {added[name][0]:>9.2f} {added[name][1]:>9.2f}{target}")


    first = out["first"]
    print("First call of a turn (opens the kept connection; ms)")
    print(f"  {'':<34} {'n':>5} {'p50':>9} {'p99':>9}")
    for name in ("http", "stdio"):
        print(_row(f"mcp {name}, first call", first[name], len(first[name])))

    parts = out["breakdown"]["http"]
    setup = statistics.median(parts["transport"])
    print("What opening a connection costs (medians, ms; once per server and turn):")
    print(f"  http : {_parts(parts)}")
    print(f"         connect + handshake includes ~{setup:.2f} building the guarded HTTP "
          "transport (its TLS context is built once per process and shared)")
    counted = out["requests"]
    print("         HTTP requests of a turn's calls: "
          + "; ".join(f"call {i + 1}: {len(r)} ({', '.join(r)})" for i, r in enumerate(counted))
          + ". The probe and the SDK's tools/list for output schemas happen once per connection")
    print(f"  stdio: {_parts(out['breakdown']['stdio'])}")
    bare, sdk = out["process"]
    print(f"         opening a stdio connection starts a server process: a bare python starts in "
          f"{bare:.1f}, python + import of the SDK server takes {sdk:.1f}")
    print("The SDK client alone on one open connection (the floor, ms)")
    print(f"  {'':<34} {'n':>5} {'p50':>9} {'p99':>9}")
    for name in ("http", "stdio"):
        samples = out["reused"][name]
        print(_row(f"mcp {name}, SDK call_tool", samples, len(samples)))

    disc = out["discover"]
    median = statistics.median(disc)
    print(f"Discovery: discover() of a {LIST_TOOLS}-tool server over HTTP, each on its own "
          "connection (ms)")
    print(f"  {'':<34} {'n':>5} {'p50':>9} {'p99':>9}")
    print(_row("discover()", disc, len(disc)) + f"   (target p50 <= {TARGET_DISCOVER_MS:g}; "
          f"{CPU_MS['discover']:.2f} ms of the client's CPU each)")
    print(f"  breakdown: {_parts(out['discover_breakdown'])}")

    http_added = added["mcp http"][0]
    if http_added > TARGET_HTTP_ADDED_MS:
        floor = statistics.median(out["reused"]["http"])
        missed.append(
            f"an MCP call over HTTP adds {http_added:.2f} ms at the median "
            f"(target <= {TARGET_HTTP_ADDED_MS:g} ms). Calls run on the turn's kept connection; "
            f"the SDK client alone takes {floor:.2f} ms per call on it, so the rest is the "
            "client's own work (the owner task, the queue) or the machine. Requests per call: "
            + "; ".join(", ".join(r) for r in counted) + ".")
    if median > TARGET_DISCOVER_MS:
        parts = out["discover_breakdown"]
        missed.append(
            f"discover() of {LIST_TOOLS} tools takes {median:.2f} ms at the median "
            f"(target <= {TARGET_DISCOVER_MS:g} ms): {_parts(parts)}; connect + handshake "
            f"includes ~{statistics.median(parts['transport']):.2f} ms building the HTTP "
            "transport. A discovery opens its own connection (a new TCP connection and the "
            "server/discover probe) and lists every page.")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the number of measured calls (default 1.0)")
    parser.add_argument("--serve-http", type=int, metavar="TOOLS", help=argparse.SUPPRESS)
    parser.add_argument("--serve-stdio", action="store_true", help=argparse.SUPPRESS)
    _measure.add_profile_argument(parser)
    args = parser.parse_args(argv)
    if args.serve_http:
        serve_http(args.serve_http)
        return 0
    if args.serve_stdio:
        serve_stdio()
        return 0

    from bench._django import setup_django

    # As in production: no debug; the outbound policy is configured in ``collect``.
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    setup_django(migrate=False)
    with _measure.profiled("mcp", {"bench": os.getpid()}, args.profile):
        out = asyncio.run(collect(args.scale))
    missed = report(out)
    _measure.record("mcp", {"MCP call over HTTP: client CPU ms": CPU_MS["mcp http"],
                            "MCP call over stdio: client CPU ms": CPU_MS["mcp stdio"],
                            "discover() of 200 tools: client CPU ms": CPU_MS["discover"]})
    for problem in missed:
        print(f"TARGET MISSED: {problem}")
    if args.check and missed:
        return 1
    if args.check:
        print("All targets met.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
