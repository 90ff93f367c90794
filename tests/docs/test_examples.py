"""The API examples of the documentation (``docs/examples/``, shown in docs/api.md through
``--8<--``) are run, each file as it is, against a live stack (``agentsite.stack.Stack``: daphne,
a Celery worker, beat, the embedded Redis, the demo model) whose agent is the one the examples
name (``demo-assistant``), with the server and key in ``AGENTSITE_URL`` and
``AGENTSITE_API_KEY``, as a reader would run them.

The Python examples run on this virtualenv (``openai``, ``langchain-openai`` and ``httpx`` are in
the dev extra), except LiteLLM's: the project's virtualenv never gets LiteLLM, so it runs on the
benchmarks' LiteLLM virtualenv in the machine's cache (``bench/_litellm.py``; installed on first
use, about a minute), and openai-agents', whose package shares this project's app's name
(``tests/e2e/clients/openai_agents.py``). Where that cannot be installed, or ``curl`` is missing, the test skips
saying why."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentsite.stack import Stack
from tests.e2e.clients import openai_agents

pytestmark = [pytest.mark.worker, pytest.mark.own_stack, pytest.mark.timeout(300)]

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
AGENT = "Demo assistant"  # slug demo-assistant, the agent of `make run` the examples call
ANSWER = "42"  # "What is 6 times 7?": the demo model asks the calculator


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with Stack(worker_threads=4) as running:
        ids = running.seed({"agents": [{"name": AGENT, "tools": ["calculator", "current_time"]}],
                            "api_keys": [{"name": "docs", "user": "alice", "scopes": ["chat"]}]})
        assert ids["slugs"][AGENT] == "demo-assistant"
        running.key = ids["keys"]["docs"]
        yield running


def run(stack: Stack, command: list[str], **env: str) -> list[str]:
    """The example's output lines; it must exit 0 within a minute."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "AGENTSITE_URL": stack.url,
                               "AGENTSITE_API_KEY": stack.key, **env})
    assert done.returncode == 0, f"{command[-1]} failed:\n{done.stdout}\n{done.stderr}"
    return [line for line in done.stdout.splitlines() if line.strip()]


def python(example: str) -> list[str]:
    return [sys.executable, str(EXAMPLES / example)]


def litellm_python() -> str:
    from bench import _litellm

    try:
        return str(_litellm.prepare().parent / "python")
    except _litellm.Unavailable as exc:
        pytest.skip(f"LiteLLM could not be installed on this machine: {str(exc).splitlines()[0]}")


def assert_answered_then_streamed(lines: list[str]) -> None:
    """An answer naming 42, its token count, then the streamed answer."""
    assert ANSWER in lines[0], lines
    assert re.match(r"\d+ tokens", lines[1]), lines
    assert "demo model" in lines[2], lines


def test_the_openai_client_example(stack):
    lines = run(stack, python("openai_client.py"))

    assert ANSWER in lines[0], lines
    assert re.fullmatch(rf"\d+ tokens, trace: {re.escape(stack.url)}/traces/[-0-9a-f]{{36}}/", lines[1]), lines
    assert "demo model" in lines[2], lines
    assert re.fullmatch(r"\d+ tokens", lines[3]), lines  # the usage chunk of the stream


def test_the_langchain_example(stack):
    assert_answered_then_streamed(run(stack, python("langchain_client.py")))


def test_the_litellm_example(stack):
    # The bundled model price map, not a download from GitHub when litellm is imported.
    lines = run(stack, [litellm_python(), str(EXAMPLES / "litellm_client.py")],
                LITELLM_LOCAL_MODEL_COST_MAP="True")
    assert_answered_then_streamed(lines)


def test_the_openai_responses_example(stack):
    lines = run(stack, python("openai_responses.py"))

    assert ANSWER in lines[0], lines
    assert lines[1].startswith("the agent called calculator -> 42"), lines
    assert "demo model" in lines[2], lines
    assert re.fullmatch(r"\d+ tokens", lines[-1]), lines


def test_the_openai_agents_example(stack):
    # openai-agents' package is named ``agents``, as this project's app is: its own virtualenv.
    lines = run(stack, [str(openai_agents.prepare()), str(EXAMPLES / "openai_agents_client.py")])

    assert ANSWER in lines[0], lines
    assert "demo model" in lines[1], lines


def test_the_httpx_rest_example(stack):
    lines = run(stack, python("rest_client.py"))

    assert ANSWER in lines[0], lines
    assert lines[1].startswith(f"trace: {stack.url}/"), lines


def curl(example: str) -> list[str]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed on this machine: the curl examples cannot run")
    return ["sh", "-eu", str(EXAMPLES / example)]


def test_the_curl_chat_example_answers_then_streams(stack):
    lines = run(stack, curl("curl_chat.sh"))

    completion = json.loads(lines[0])
    assert completion["object"] == "chat.completion"
    assert ANSWER in completion["choices"][0]["message"]["content"]
    events = lines[1:]
    assert all(line.startswith("data: ") for line in events), events
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert "demo model" in text


def test_the_curl_rest_example_lists_the_agents(stack):
    page = json.loads("".join(run(stack, curl("curl_rest.sh"))))

    assert [agent["slug"] for agent in page["data"]] == ["demo-assistant"]
    assert page["next_cursor"] is None


EXAMPLE_TESTS: dict[str, Callable] = {
    "openai_client.py": test_the_openai_client_example,
    "langchain_client.py": test_the_langchain_example,
    "litellm_client.py": test_the_litellm_example,
    "openai_responses.py": test_the_openai_responses_example,
    "openai_agents_client.py": test_the_openai_agents_example,
    "rest_client.py": test_the_httpx_rest_example,
    "curl_chat.sh": test_the_curl_chat_example_answers_then_streams,
    "curl_rest.sh": test_the_curl_rest_example_lists_the_agents,
}


def test_every_example_is_run_and_shown():
    """A file added to docs/examples/ gets a test here, and every one is on a page."""
    assert {p.name for p in EXAMPLES.iterdir() if p.is_file()} == set(EXAMPLE_TESTS)
    pages = "".join(p.read_text() for p in EXAMPLES.parent.glob("*.md"))
    assert not [name for name in EXAMPLE_TESTS if f'--8<-- "{name}"' not in pages]
