"""LiteLLM's proxy for ``bench.gateway``: ``litellm --config <cfg> --port <free> --num_workers 1``
from a virtualenv of its own, answering one model with a fixed ``mock_response``.

The virtualenv is ``$AGENTSITE_CACHE_DIR`` (default ``~/.cache/agentsite``)
``/litellm-<version>/venv`` with ``litellm[proxy]==<version>``, outside the clone and shared by
every clone on the machine: installed once (a few minutes, about 600 MB; ``install.log`` beside
it) with ``tests/cached_server.py``'s lock and ready marker, as ``tests/otel/phoenix.py`` installs
Phoenix. An install made by hand without the marker is adopted when its Python reports the
version. The project's own virtualenv never gets LiteLLM. The proxy takes 8-20 s to start.

``prepare()`` raises ``Unavailable`` when LiteLLM cannot be installed here, ``serving()`` raises
``Failed`` when it does not start: the gateway benchmark then says so and compares against the
figures of its previous run in ``bench/baseline.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests import cached_server
from tests.cached_server import Failed, Unavailable, cache_dir

__all__ = ["Failed", "Proxy", "Unavailable", "prepare", "serving"]

VERSION = "1.108.7"
REQUIREMENT = f"litellm[proxy]=={VERSION}"
MODEL = "bench"
MASTER_KEY = "sk-bench"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
# Its own settings only: a DATABASE_URL or REDIS_URL of the caller would make it use them.
DROPPED_ENV = ("DATABASE_URL", "REDIS_URL", "REDIS_HOST", "OPENAI_API_KEY", "OPENAI_BASE_URL")


@dataclass
class Proxy:
    url: str
    key: str
    model: str
    pid: int
    log: Path


def venv_dir() -> Path:
    return cache_dir() / f"litellm-{VERSION}" / "venv"


def say(message: str) -> None:
    cached_server.say("litellm", message)


def _adopt(venv: Path) -> None:
    """Mark ready an install made without the marker whose Python has the right LiteLLM."""
    python = venv / "bin" / "python"
    if (venv / ".ready").exists() or not (venv / "bin" / "litellm").exists() or not python.exists():
        return
    probe = ("import importlib.metadata as m, importlib.util as u; "
             "print(m.version('litellm'), all(u.find_spec(n) for n in ('fastapi', 'uvicorn', 'backoff')))")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False,  # noqa: S603
                          timeout=60)
    if done.returncode == 0 and done.stdout.split() == [VERSION, "True"]:
        (venv / ".ready").write_text(json.dumps({"requirement": REQUIREMENT, "adopted": True}))
        say(f"adopted the LiteLLM {VERSION} already installed in {venv}")


def prepare() -> Path:
    """The cache venv's ``litellm`` executable, installing LiteLLM first when needed; a failed
    install is ``Unavailable``."""
    cache = cache_dir()
    with cached_server.locked(cache / ".litellm.lock"):
        venv = venv_dir()
        _adopt(venv)
        return cached_server.install_venv(
            venv, REQUIREMENT, executable="litellm", log=venv.parent / "install.log",
            announce=f"installing {REQUIREMENT} into {venv} (first time on this machine: a few "
                     "minutes)",
            say=say, failure=Unavailable)


def config(mock_response: str) -> str:
    """The proxy's configuration (JSON is YAML): one model answering ``mock_response``."""
    return json.dumps({
        "model_list": [{"model_name": MODEL, "litellm_params": {
            "model": f"openai/{MODEL}", "api_key": "sk-none", "mock_response": mock_response}}],
        "general_settings": {"master_key": MASTER_KEY},
        "litellm_settings": {"telemetry": False},
    }, indent=2)


@contextlib.contextmanager
def serving(executable: Path, mock_response: str) -> Iterator[Proxy]:
    """The proxy on a free port until the block ends; ``Failed`` when it does not answer."""
    port = cached_server.free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="agentsite-bench-litellm-") as working:
        folder = Path(working)
        (folder / "config.yaml").write_text(config(mock_response))
        env = {key: value for key, value in os.environ.items()
               if key not in DROPPED_ENV and not key.startswith("LITELLM_")}
        # Quiet, and the bundled model cost map instead of a download at start.
        env.update(LITELLM_LOG="ERROR", LITELLM_LOCAL_MODEL_COST_MAP="True")
        log = folder / "litellm.log"
        command = [str(executable), "--config", str(folder / "config.yaml"), "--host", "127.0.0.1",
                   "--port", str(port), "--num_workers", "1"]
        with cached_server.running(command, name="LiteLLM", ready_url=f"{url}/health/liveliness",
                                   log=log, start_timeout=START_TIMEOUT_S,
                                   stop_timeout=STOP_TIMEOUT_S, env=env) as took:
            pid = _listener(port)
            say(f"LiteLLM {VERSION} at {url}, up in {took:.1f} s")
            yield Proxy(url=url, key=MASTER_KEY, model=MODEL, pid=pid, log=log)


def _listener(port: int) -> int:
    """The process listening on ``port`` (the proxy), found through /proc/net/tcp's inode."""
    inode = ""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":  # LISTEN
            inode = fields[9]
            break
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) == f"socket:[{inode}]":
                    return int(entry.name)
    raise Failed(f"no process listens on port {port}")
