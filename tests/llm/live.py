"""Where the live LLM tests find their server, and why they skip when there is none.

``make test-llm`` (``python -m tests.llm.server run -- ...``) builds and starts a llama.cpp
server and sets ``AGENTSITE_LIVE_LLM_URL``; pointed at a server that is already running, the
tests use that one. Without either they skip, with the reason why.
"""

from __future__ import annotations

import os

import pytest

from tests.llm.server import MODEL_ALIAS, MODEL_ENV, UNAVAILABLE_ENV, URL_ENV

URL = os.environ.get(URL_ENV, "").rstrip("/")
MODEL = os.environ.get(MODEL_ENV, "") or MODEL_ALIAS
API_KEY = os.environ.get("AGENTSITE_LIVE_LLM_KEY") or None

SKIP_REASON = os.environ.get(UNAVAILABLE_ENV) or (
    f"no llama.cpp server: `make test-llm` builds and starts one, or set {URL_ENV} to the base "
    "URL (.../v1) of a running OpenAI-compatible server")

# For a module's ``pytestmark``.
LIVE = [pytest.mark.live_llm, pytest.mark.skipif(not URL, reason=SKIP_REASON)]


def server_streams_usage() -> bool:
    """Whether the server sends token counts in a stream when asked (``include_usage``):
    llama-cpp-python's does not, so the runtime must estimate them and say so."""
    import json

    import httpx

    body = {"model": MODEL, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    headers = {"authorization": f"Bearer {API_KEY}"} if API_KEY else {}
    with httpx.stream("POST", f"{URL}/chat/completions", json=body, headers=headers,
                      timeout=120) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            data = line.removeprefix("data:").strip()
            if not data or data == "[DONE]":
                continue
            usage = json.loads(data).get("usage") or {}
            if usage.get("completion_tokens"):
                return True
    return False
