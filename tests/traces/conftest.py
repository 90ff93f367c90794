"""Fixtures of the cost and budget tests: an agent whose demo model has a price, and alice's
conversation with it; of the export tests, a real OTLP receiver in this process. (The agent,
the conversation and the sample trace are shared by every app, in ``tests/conftest.py``.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.otel.receiver import OTLPReceiver


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    """An OTLP/HTTP receiver on loopback (``tests.otel.receiver``), stopped after the test."""
    with OTLPReceiver() as running:
        yield running


@pytest.fixture
def priced_agent(make_agent, team_a):
    """Team A's "Helper", its demo model priced for the team (``cost_helpers.priced_demo``)."""
    from .cost_helpers import priced_demo

    priced_demo(team_a)
    return make_agent()


@pytest.fixture
def chat(priced_agent, alice):
    """alice's conversation with ``priced_agent``."""
    from agents.models import Conversation

    return Conversation.objects.create(team=priced_agent.team, agent=priced_agent, created_by=alice,
                                       title="Alice's chat")
