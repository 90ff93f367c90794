"""The cache explainer in a real browser: two messages, the agent's system prompt changed, a third
message, and the third turn's model request explains in the inspector that the prompt cache
missed because of the agent's system prompt."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

from agentsite.stack import ROOT

PROMPT = "You are a careful assistant. Answer briefly and check your arithmetic. " * 80


def set_system_prompt(stack, agent: str, text: str) -> None:
    """Through the ORM, in the stack's own environment (the test process has no database)."""
    code = ("from agents.models import Agent; "
            f"Agent.objects.filter(uuid={agent!r}).update(system_prompt={text!r})")
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=stack.env,  # noqa: S603
                   check=True, capture_output=True, text=True)


def test_a_changed_system_prompt_is_named_by_the_cache_explainer_of_the_next_request(login, stack):
    name = f"Cache {uuid.uuid4().hex[:6]}"
    seeded = stack.seed({"agents": [{"name": name, "tools": [], "provider_options": {"token_delay_s": 0.002},
                                     "fields": {"system_prompt": PROMPT}}]})
    stack.ids["agents"][name] = seeded["agents"][name]
    s = login("alice")
    s.open_chat_with(name)
    s.send("hello")
    s.answers("completed").nth(0).wait_for()
    s.send("thanks")
    s.answers("completed").nth(1).wait_for()

    set_system_prompt(stack, seeded["agents"][name], "Answer in French. " + PROMPT)
    s.send("what can you do?")
    third = s.answers("completed").nth(2)
    third.wait_for()

    third.locator("a.trace-link").click()
    s.page.wait_for_url(re.compile(r"/traces/[0-9a-f-]+/$"))
    s.page.locator("#steps li.step.k-llm_request summary").first.click()
    cache = s.page.locator("#steps li.step.k-llm_request section.prompt-cache[data-verdict]").first
    cache.wait_for()
    text = cache.inner_text()

    assert cache.get_attribute("data-verdict") == "changed"
    assert "the last request of the conversation's previous turn" in text
    assert "The agent's system prompt (system block 1)" in text
    assert "Answer in French." in cache.locator(".cache-after").inner_text()
    assert re.search(r"Lost to the miss\s+\d+ tokens billed as input", text)
    assert not s.watch.errors
