"""The MCP servers ``bench.mcp_overhead`` measures against, each in a child process of its own:
written with the ``mcp`` SDK, serving ``add(a, b)`` and as many generated tools of the same small
schema as asked, over Streamable HTTP on 127.0.0.1 (``http_server``) or over stdio
(``serve_stdio``, which the stdio client starts). A child exits when its parent goes, or after
``MAX_SERVER_S`` whatever happens.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

ROOT = Path(__file__).resolve().parent.parent
MAX_SERVER_S = 600.0  # a server child exits after this long whatever happens
START_TIMEOUT_S = 30.0


def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


def build_server(tools: int) -> Any:
    """An SDK server with ``add`` and ``tools - 1`` generated tools of the same small schema."""
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
