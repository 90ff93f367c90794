"""Fixtures for turns: an agent with the built-in tools and a conversation with it. (Captured
task sends, ``make_agent`` and ``run_in_thread`` are shared, in ``tests/conftest.py``.)"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


@pytest.fixture
def agent(make_agent):
    return make_agent()


@pytest.fixture
def conversation(agent, alice):
    from agents.chat.services import conversation_create

    return conversation_create(team=agent.team, agent=agent, user=alice)


def wait_for(predicate: Callable[[], object], *, timeout: float = 10.0, interval: float = 0.02):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")
