"""Fixtures for memory: alice's memory with the shared ``agent`` of team A, and storing in it."""

from __future__ import annotations

import pytest


@pytest.fixture
def alice_owner(agent, alice):
    from memory.services import MemoryOwner

    return MemoryOwner(team_id=agent.team_id, agent_id=agent.pk, user_id=alice.pk)


@pytest.fixture
def store(alice_owner):
    """``store(key, content, **kwargs)`` in alice's user memory (or ``owner=``)."""
    from memory.services import memory_store

    def make(key, content, *, owner=None, **kwargs):
        return memory_store(owner=owner or alice_owner, key=key, content=content, **kwargs)

    return make
