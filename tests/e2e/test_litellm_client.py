"""LiteLLM's client against a live stack (daphne, a Celery worker, the embedded Redis, the demo
model), from LiteLLM's own virtualenv in the machine's cache (``bench/_litellm.py``): its
``max_tokens`` cuts the answer with ``finish_reason == "length"``, a JSON ``response_format``
comes back as JSON, and a field that cannot be honoured is LiteLLM's ``BadRequestError``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)
SCRIPT = Path(__file__).parent / "clients" / "litellm_run.py"


def test_litellm_max_tokens_json_and_a_refusal(stack):
    from bench import _litellm

    python = _litellm.prepare().parent / "python"  # installs it the first time (a few minutes)
    done = subprocess.run(  # noqa: S603 - our own script, LiteLLM's own virtualenv
        [str(python), str(SCRIPT)], capture_output=True, text=True, timeout=180, check=False,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")},
             "AGENTSITE_URL": stack.url, "AGENTSITE_KEY": stack.ids["keys"]["alice-chat"],
             "AGENTSITE_MODEL": "helper", "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    got = json.loads(done.stdout.strip().splitlines()[-1])

    assert got["cut"]["finish"] == "length" and 0 < got["cut"]["tokens"] <= 5
    assert got["whole"]["finish"] == "stop" and got["whole"]["tokens"] > 5
    assert got["whole"]["text"].startswith(got["cut"]["text"].strip())
    assert "demo model" in json.loads(got["structured"])["answer"]
    assert got["refused"] and "logprobs" in got["refused"]
