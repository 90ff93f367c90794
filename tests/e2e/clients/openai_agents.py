"""openai-agents, from a virtualenv of its own: its top-level package is named ``agents``, as
this project's app is, so it can never be installed beside it.

The virtualenv is ``$AGENTSITE_CACHE_DIR`` (default ``~/.cache/agentsite``)
``/openai-agents-<version>/venv``, outside the clone and shared by every clone on the machine:
installed once (about a minute; ``install.log`` beside it) with ``tests/cached_server.py``'s lock
and ready marker. ``run(script, env)`` runs a script of ``tests/e2e/clients/`` with that
virtualenv's Python and returns what it printed, parsed as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests import cached_server
from tests.cached_server import cache_dir

VERSION = "0.24.0"
REQUIREMENT = f"openai-agents=={VERSION}"
HERE = Path(__file__).parent


def say(message: str) -> None:
    cached_server.say("openai-agents", message)


def prepare() -> Path:
    """The virtualenv's Python, installing openai-agents first when needed."""
    cache = cache_dir()
    with cached_server.locked(cache / ".openai-agents.lock"):
        venv = cache / f"openai-agents-{VERSION}" / "venv"
        return cached_server.install_venv(
            venv, REQUIREMENT, log=venv.parent / "install.log",
            announce=f"installing {REQUIREMENT} into {venv} (first time on this machine: about a "
                     "minute)", say=say)


def run(script: str, env: dict[str, str], *, timeout_s: float = 180) -> dict:
    """Run ``tests/e2e/clients/<script>`` with openai-agents' Python and ``env``; its JSON."""
    python = prepare()
    done = subprocess.run(  # noqa: S603 - our own script, our own virtualenv
        [str(python), str(HERE / script)], capture_output=True, text=True, timeout=timeout_s,
        check=False, cwd=HERE,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}, **env})
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])
