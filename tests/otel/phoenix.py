"""A real Arize Phoenix server for the tests: ``phoenix serve`` from a virtualenv of its own, on
free ports, with a fresh SQLite store each time, offline and without telemetry.

Standard library only, so any Python 3.11+ can run it::

    python -m tests.otel.phoenix prepare          # build the cache once; print its paths
    python -m tests.otel.phoenix serve            # ...and serve until Ctrl-C
    python -m tests.otel.phoenix run -- CMD ...   # ...and run CMD against it, then stop it

The cache lives outside the clone, in ``$AGENTSITE_CACHE_DIR`` (default
``~/.cache/agentsite``), and is shared by every clone on the machine:
``phoenix-<version>/venv/`` is a virtualenv with ``arize-phoenix==<version>`` (about 850 MB,
about a minute to install from PyPI on two cores, with ``install.log`` beside it). ``.ready``
in it marks a finished install, so a second ``prepare`` is instant; an unfinished one is
removed and redone. The project's own virtualenv never gets Phoenix. The server takes 7-10 s to
start (most of it imports) and about 450 MB of memory.

``run`` sets ``AGENTSITE_PHOENIX_URL`` (``http://127.0.0.1:<port>``, the OTLP/HTTP endpoint is
``<url>/v1/traces``) for the command. When ``AGENTSITE_PHOENIX_URL`` is already set, nothing is
installed or started: the command runs against that server. When Phoenix cannot be installed
here (no ``venv`` module, pip failing, PyPI out of reach), the command still runs, with
``AGENTSITE_PHOENIX_UNAVAILABLE`` saying why, and the tests skip with that reason; with
``AGENTSITE_PHOENIX_REQUIRED=1`` that is an error instead. A server that is installed and does
not start is always an error.

The server is started with every ``PHOENIX_*`` and ``OTEL_*`` variable of the caller removed
(one pointing at another database or collector must not leak in), then:
``PHOENIX_HOST=127.0.0.1``, ``PHOENIX_PORT`` and ``PHOENIX_GRPC_PORT`` (two free ports),
``PHOENIX_WORKING_DIR`` (a temporary directory, removed afterwards: its ``phoenix.db`` is the
SQLite store), telemetry, external resources (web fonts, the WASM sandbox download), the agent
assistant and the MCP server off, and migrations not logged (they print every SQL statement).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

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


class Unavailable(Exception):
    """Phoenix cannot be installed on this machine; the message says why."""


class StartFailed(Exception):
    """Phoenix is installed and did not start; the message quotes its log."""


def cache_dir() -> Path:
    configured = os.environ.get("AGENTSITE_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "agentsite"


def venv_dir(cache: Path) -> Path:
    return cache / f"phoenix-{PHOENIX}" / "venv"


def say(message: str) -> None:
    print(f"[phoenix] {message}", file=sys.stderr, flush=True)


# -- preparing the cache ------------------------------------------------------------------------
@contextlib.contextmanager
def locked(cache: Path) -> Iterator[None]:
    """One installation at a time per cache (two clones testing at once share it)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".phoenix.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_logged(what: str, command: Sequence[str], log: Path,
               env: dict[str, str] | None = None) -> None:
    """Run ``command`` with its output appended to ``log``; ``Unavailable`` when it fails, its
    first line naming ``what`` failed and the last error line (the skip reason), then the
    log's tail."""
    with open(log, "a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)  # noqa: S603
    if done.returncode:
        output = log.read_text(errors="replace")
        errors = [line.strip() for line in output.splitlines() if line.startswith("ERROR")]
        cause = f": {errors[-1]}" if errors else ""
        raise Unavailable(f"{what} failed (exit {done.returncode}){cause}; log: {log}\n"
                          f"{output[-3000:]}")


def prepare() -> Path:
    """The cache venv's ``phoenix`` executable, installing Phoenix first when needed."""
    cache = cache_dir()
    with locked(cache):
        venv = venv_dir(cache)
        executable = venv / "bin" / "phoenix"
        ready = venv / ".ready"
        if ready.exists() and executable.exists():
            return executable
        if importlib.util.find_spec("ensurepip") is None:
            raise Unavailable(f"{sys.executable} cannot create a virtualenv (no ensurepip; "
                              "apt-get install python3-venv)")
        if venv.exists():  # an earlier install that did not finish
            shutil.rmtree(venv)
        venv.parent.mkdir(parents=True, exist_ok=True)
        log = venv.parent / "install.log"
        log.write_text("")
        say(f"installing arize-phoenix {PHOENIX} into {venv} (first time on this machine: about "
            f"a minute, 850 MB); log: {log}")
        started = time.monotonic()
        run_logged("creating a virtualenv", [sys.executable, "-m", "venv", str(venv)], log)
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        run_logged(f"pip install arize-phoenix=={PHOENIX}",
                   [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    f"arize-phoenix=={PHOENIX}"], log, env=env)
        if not executable.exists():
            raise Unavailable(f"arize-phoenix {PHOENIX} installed no {executable}; see {log}")
        took = time.monotonic() - started
        ready.write_text(json.dumps({"arize-phoenix": PHOENIX, "python": sys.version.split()[0],
                                     "seconds": round(took)}))
        say(f"installed in {took:.0f} s")
        return executable


# -- running the server -------------------------------------------------------------------------
def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (all bound at once, so none is handed out twice)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def server_env(port: int, grpc_port: int, working_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PHOENIX_", "OTEL_"))}
    env.update(SERVER_SETTINGS, PHOENIX_PORT=str(port), PHOENIX_GRPC_PORT=str(grpc_port),
               PHOENIX_WORKING_DIR=str(working_dir))
    return env


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:  # noqa: S310 - loopback
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def serving(executable: Path, port: int | None = None) -> Iterator[str]:
    """Phoenix on ``port`` (a free one by default) until the block ends, with an empty store;
    yields its base URL once ``/healthz`` answers."""
    port, grpc_port = free_ports(2) if not port else (port, free_ports(1)[0])
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="phoenix-") as working:
        log = Path(working) / "server.log"
        with open(log, "w") as out:
            process = subprocess.Popen([str(executable), "serve"], stdout=out,  # noqa: S603
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       env=server_env(port, grpc_port, Path(working)))
        try:
            started = time.monotonic()
            while not answers(url):
                if process.poll() is not None or time.monotonic() > started + START_TIMEOUT_S:
                    tail = log.read_text(errors="replace")[-3000:]
                    raise StartFailed(f"Phoenix did not answer on {url}; its log:\n{tail}")
                time.sleep(0.25)
            say(f"Phoenix {PHOENIX} at {url} (OTLP gRPC on {grpc_port}), up in "
                f"{time.monotonic() - started:.1f} s; log: {log}")
            yield url
        finally:
            stop(process)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL when it has not stopped in time."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


# -- the command line ---------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.otel.phoenix", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("prepare", help="install Phoenix into the cache; print PHOENIX=")
    serve = commands.add_parser("serve", help="prepare and serve until interrupted")
    serve.add_argument("--port", type=int, default=0)
    run = commands.add_parser("run", help="prepare, serve, and run a command against the server")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    args = parser.parse_args(argv)
    stop_on_signals()

    if args.command == "run":
        return run_command(_after_dashes(args.cmd))
    executable = prepare()
    if args.command == "prepare":
        print(f"PHOENIX={executable}")
        return 0
    with serving(executable, args.port) as url:
        print(f"{URL_ENV}={url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


def stop_on_signals() -> None:
    """SIGTERM and SIGINT raise ``KeyboardInterrupt``, so that the server is stopped on the way
    out, even where SIGINT came ignored (a background job of a script)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _after_dashes(cmd: list[str]) -> list[str]:
    return cmd[1:] if cmd and cmd[0] == "--" else cmd


def run_command(cmd: list[str]) -> int:
    if not cmd:
        say("run needs a command: run -- CMD ...")
        return 2
    env = {key: value for key, value in os.environ.items() if key != UNAVAILABLE_ENV}
    if env.get(URL_ENV):
        say(f"using the server at {env[URL_ENV]} ({URL_ENV} is set)")
        return subprocess.call(cmd, env=env)  # noqa: S603
    try:
        executable = prepare()
    except Unavailable as exc:
        if env.get(REQUIRED_ENV) == "1":
            raise
        say(f"{exc}\nthe Phoenix tests will skip")
        reason = str(exc).splitlines()[0]  # the log's tail stays on the terminal
        return subprocess.call(cmd, env={**env, UNAVAILABLE_ENV: reason})  # noqa: S603
    with serving(executable) as url:
        return subprocess.call(cmd, env={**env, URL_ENV: url})  # noqa: S603


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (Unavailable, StartFailed) as exc:
        say(str(exc))
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
