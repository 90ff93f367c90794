"""The case that was measured from outside, against a live stack (``agentsite.stack.Stack``:
daphne, a Celery worker, the embedded Redis, the demo model) with the official ``openai``
client: one key, ``user="alice"`` asks the agent to remember her bank PIN hint, ``user="bob"``
asks for his and must not get hers, and alice gets hers back. The demo model stores and recalls
through the agent's real memory tools (``memory_store``, ``memory_recall``), which the test gives
the agent in the stack's own database."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import openai
import pytest

from agentsite.stack import ROOT, Stack

pytestmark = [pytest.mark.worker, pytest.mark.own_stack, pytest.mark.timeout(300)]
AGENT = "Keeper"
GIVE_MEMORY_TOOLS = f"""
from agents.models import Agent, Tool
from agents.team_config import team_config_changed
agent = Agent.objects.get(name={AGENT!r})
for name in ("memory_store", "memory_recall"):
    row, _ = Tool.objects.get_or_create(team=agent.team, name=name, defaults={{"kind": "builtin"}})
    agent.tools.add(row)
team_config_changed(agent.team_id)
"""


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with Stack(worker_threads=2) as running:
        ids = running.seed({"agents": [{"name": AGENT, "tools": []}],
                            "api_keys": [{"name": "app", "user": "alice", "scopes": ["chat"]}]})
        subprocess.run([sys.executable, "manage.py", "shell", "-c", GIVE_MEMORY_TOOLS],  # noqa: S603
                       cwd=ROOT, env=running.env, check=True, capture_output=True, text=True)
        running.key = ids["keys"]["app"]
        running.slug = ids["slugs"][AGENT]
        yield running


def test_one_end_user_cannot_recall_anothers_memory(stack):
    api = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.key, max_retries=0, timeout=60)

    def ask(user: str, text: str) -> str:
        completion = api.chat.completions.create(
            model=stack.slug, user=user, messages=[{"role": "user", "content": text}])
        return completion.choices[0].message.content or ""

    stored = ask("alice", "Remember that my bank PIN hint is sunflower")
    assert "sunflower" in stored, stored
    bobs = ask("bob", "What is my bank PIN hint?")
    assert "sunflower" not in bobs, bobs
    # The key's person, without an end user, has no such memory either.
    assert "sunflower" not in ask("", "What is my bank PIN hint?")
    alices = ask("alice", "What is my bank PIN hint?")
    assert "sunflower" in alices, alices

    with pytest.raises(openai.BadRequestError) as refused:
        ask("x" * 257, "hello")
    assert refused.value.body["param"] == "user"
