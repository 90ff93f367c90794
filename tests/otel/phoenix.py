"""A real Arize Phoenix server for the tests: ``phoenix serve`` from a virtualenv of its own, on
free ports, with a fresh SQLite store each time, offline and without telemetry.

Standard library only, so any Python 3.11+ can run it. Its command line, the cache's place
and lock, the virtualenv's install and the server's start and stop are
``tests/cached_server.py``'s (``tests/llm/server.py`` uses them too); this module holds what is
particular to Phoenix::

    python -m tests.otel.phoenix prepare          # install Phoenix once; print PHOENIX=
    python -m tests.otel.phoenix serve            # ...and serve until Ctrl-C
    python -m tests.otel.phoenix run -- CMD ...   # ...and run CMD against it, then stop it

The cache, ``$AGENTSITE_CACHE_DIR`` (default ``~/.cache/agentsite``), is outside the clone and
shared by every clone on the machine: ``phoenix-<version>/venv/`` is a virtualenv with
``arize-phoenix==<version>`` (about 850 MB, about a minute to install from PyPI on two cores,
with ``install.log`` beside it). ``.ready`` in it marks a finished install, so a second
``prepare`` is instant; an unfinished one is removed and redone. The project's own virtualenv never gets Phoenix. The server takes 7-10 s to
start (most of it imports) and about 450 MB of memory.

``run`` sets ``AGENTSITE_PHOENIX_URL`` (``http://127.0.0.1:<port>``, the OTLP/HTTP endpoint is
``<url>/v1/traces``) for the command. When ``AGENTSITE_PHOENIX_URL`` is already set, nothing is
installed or started: the command runs against that server. When Phoenix cannot be installed
here (no ``venv`` module, pip failing, PyPI out of reach), the command still runs, with
``AGENTSITE_PHOENIX_UNAVAILABLE`` saying why, and the tests skip with that reason; with
``AGENTSITE_PHOENIX_REQUIRED=1`` that is an error instead. A server that is installed and does
not start is always an error. SIGTERM stops the server too, and so does SIGINT where it came
ignored (a background job of a script).

The server is started with every ``PHOENIX_*`` and ``OTEL_*`` variable of the caller removed
(one pointing at another database or collector must not leak in), then:
``PHOENIX_HOST=127.0.0.1``, ``PHOENIX_PORT`` and ``PHOENIX_GRPC_PORT`` (two free ports),
``PHOENIX_WORKING_DIR`` (a temporary directory, removed afterwards: its ``phoenix.db`` is the
SQLite store), telemetry, external resources (web fonts, the WASM sandbox download), the agent
assistant and the MCP server off, and migrations not logged (they print every SQL statement).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests import cached_server
from tests.cached_server import Unavailable, cache_dir

PHOENIX = "20.26.1"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0

URL_ENV = "AGENTSITE_PHOENIX_URL"
UNAVAILABLE_ENV = "AGENTSITE_PHOENIX_UNAVAILABLE"
REQUIRED_ENV = "AGENTSITE_PHOENIX_REQUIRED"

# What the server runs with, on top of the caller's environment less PHOENIX_* and OTEL_*.
SERVER_SETTINGS = {
    "PHOENIX_HOST": "127.0.0.1",
    "PHOENIX_TELEMETRY_ENABLED": "false",
    "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
    "PHOENIX_ENABLE_MCP_SERVER": "false",
    "PHOENIX_ENABLE_AUTH": "false",
    "PHOENIX_LOG_MIGRATIONS": "false",
    "PYTHONWARNINGS": "ignore",
}


def venv_dir(cache: Path) -> Path:
    return cache / f"phoenix-{PHOENIX}" / "venv"


def say(message: str) -> None:
    cached_server.say("phoenix", message)


def prepare() -> Path:
    """The cache venv's ``phoenix`` executable, installing Phoenix first when needed; a failed
    install is ``Unavailable`` (the tests skip)."""
    cache = cache_dir()
    with cached_server.locked(cache / ".phoenix.lock"):
        venv = venv_dir(cache)
        return cached_server.install_venv(
            venv, f"arize-phoenix=={PHOENIX}", executable="phoenix",
            log=venv.parent / "install.log",
            announce=f"installing arize-phoenix {PHOENIX} into {venv} (first time on this "
                     "machine: about a minute, 850 MB)",
            say=say, failure=Unavailable)


# -- running the server -------------------------------------------------------------------------
def server_env(port: int, grpc_port: int, working_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PHOENIX_", "OTEL_"))}
    env.update(SERVER_SETTINGS, PHOENIX_PORT=str(port), PHOENIX_GRPC_PORT=str(grpc_port),
               PHOENIX_WORKING_DIR=str(working_dir))
    return env


@contextlib.contextmanager
def serving(executable: Path, port: int | None = None, store: Path | None = None) -> Iterator[str]:
    """Phoenix on ``port`` (a free one by default) until the block ends, with an empty store
    (or the one in the directory ``store``, which a server started again there finds as it was
    left); yields its base URL once ``/healthz`` answers."""
    if port:
        grpc_port = cached_server.free_ports(1)[0]
    else:
        port, grpc_port = cached_server.free_ports(2)
    url = f"http://127.0.0.1:{port}"
    with (contextlib.nullcontext(str(store)) if store is not None
          else tempfile.TemporaryDirectory(prefix="phoenix-")) as working:
        log = Path(working) / "server.log"
        with cached_server.running([str(executable), "serve"], name="Phoenix",
                                   ready_url=f"{url}/healthz", log=log,
                                   env=server_env(port, grpc_port, Path(working)),
                                   start_timeout=START_TIMEOUT_S,
                                   stop_timeout=STOP_TIMEOUT_S) as took:
            say(f"Phoenix {PHOENIX} at {url} (OTLP gRPC on {grpc_port}), up in {took:.1f} s; "
                f"log: {log}")
            yield url


# -- the command line ---------------------------------------------------------------------------
HARNESS = cached_server.Harness(
    prog="python -m tests.otel.phoenix", description=__doc__ or "", say=say, prepare=prepare,
    describe=lambda executable: {"PHOENIX": executable},
    prepare_help="install Phoenix into the cache; print PHOENIX=", serving=serving,
    url_env=URL_ENV, unavailable_env=UNAVAILABLE_ENV, suite="the Phoenix tests",
    required_env=REQUIRED_ENV, stop_on_signals=True)


if __name__ == "__main__":
    sys.exit(HARNESS.main())
