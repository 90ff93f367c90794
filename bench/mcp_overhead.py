"""What an MCP tool costs next to a built-in one, and what discovering a big server costs.

One trivial tool, ``add(a, b)`` returning the sum, three ways: a runtime ``FunctionTool``
(built-in), and the same function as a tool of an MCP server written with the SDK, called
through ``McpTool.execute`` (what the turn loop calls) over Streamable HTTP on loopback and over
stdio. Calls run one after another in one event loop after a warm-up, as the calls of one turn
do: the client keeps one connection per HTTP server and loop (opened by the first call, closed
by ``close_connections()`` at the end of a turn) and one per stdio server and process (across
turns), so these are calls on a kept connection; each
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
``discover()`` of a 200-tool server over HTTP takes <= 50 ms at the median; the first call of a
turn over stdio (on the server the process keeps across turns) takes no longer than over HTTP
(which opens the turn's connection) at the median. A worker's first stdio call, which starts the
server's process, is reported. The output says
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
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import _measure, _profile
from bench._mcp_report import LIST_TOOLS, report
from bench._mcp_servers import START_TIMEOUT_S, add, http_server, serve_http, serve_stdio

ROOT = Path(__file__).resolve().parent.parent
HTTP_CALLS, HTTP_WARMUP = 200, 20
STDIO_CALLS, STDIO_WARMUP = 20, 2
BREAKDOWN_RUNS = {"http": 50, "stdio": 10}
FIRST_CALL_RUNS = {"http": 20, "stdio": 3}  # first calls of a turn: each on a new connection
COUNTED_CALLS = 3
DISCOVER_RUNS, DISCOVER_WARMUP = 20, 3
BIG_CALLS = 50  # add() calls on the 200-tool server
LOOPBACK = ["127.0.0.0/8", "::1/128"]
CALL_TIMEOUT_S = 30.0

Sample = Callable[[int], Awaitable[None]]


# -- measuring ------------------------------------------------------------------------------------
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


async def first_calls(tool: Any, runs: int, *, close: Callable[[], Awaitable[None]],
                      stop_servers: Callable[[], None] | None = None) -> list[float]:
    """Ms of the first call of a turn: the turn's kept connections are closed before each
    (``close``, a turn's end), so over HTTP each opens a connection, and over stdio each goes
    to the server the process keeps (``host``); with ``stop_servers`` (``host_stop``) the
    process's servers are stopped too (a worker's first call), so each starts the server. One
    warm-up run."""
    call = caller(tool)
    samples: list[float] = []
    for i in range(runs + 1):
        await close()
        if stop_servers is not None:
            await asyncio.to_thread(stop_servers)
        started = time.perf_counter()
        await call(i)
        if i:
            samples.append((time.perf_counter() - started) * 1000)
    await close()
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
    from agents.tools.mcp.host import host_stop
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
            "http": await first_calls(runtime["mcp http"], max(int(FIRST_CALL_RUNS["http"] * scale), 3),
                                      close=close_connections),
            "stdio": await first_calls(runtime["mcp stdio"], max(int(FIRST_CALL_RUNS["http"] * scale), 3),
                                       close=close_connections),
            "stdio (starts it)": await first_calls(
                runtime["mcp stdio"], max(int(FIRST_CALL_RUNS["stdio"] * scale), 2),
                close=close_connections, stop_servers=host_stop)}
        out["breakdown"] = {
            "http": await breakdown(http, max(int(BREAKDOWN_RUNS["http"] * scale), 5)),
            "stdio": await breakdown(stdio, max(int(BREAKDOWN_RUNS["stdio"] * scale), 3))}
        out["reused"] = {"http": await reused(http, n_http, HTTP_WARMUP),
                         "stdio": await reused(stdio, n_http, HTTP_WARMUP)}
        out["process"] = await process_start()
        await close_connections()  # the kept connections of these calls
        await asyncio.to_thread(host_stop)  # and the stdio server the process kept
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the number of measured calls (default 1.0)")
    parser.add_argument("--serve-http", type=int, metavar="TOOLS", help=argparse.SUPPRESS)
    parser.add_argument("--serve-stdio", action="store_true", help=argparse.SUPPRESS)
    _profile.add_profile_argument(parser)
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
    with _profile.profiled("mcp", {"bench": os.getpid()}, args.profile):
        out = asyncio.run(collect(args.scale))
    missed = report(out, CPU_MS)
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
