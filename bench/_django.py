"""Run a benchmark against a scratch database: a throwaway SQLite file unless DATABASE_URL is set
(then that database is used as it is — point it at a scratch database)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any


def setup_django(*, migrate: bool = True) -> str:
    """Configure Django on a scratch var/ directory; returns that directory."""
    scratch = tempfile.mkdtemp(prefix="agentsite-bench-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.environ.setdefault("AGENTSITE_VAR_DIR", scratch)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    os.environ.setdefault("CHANNEL_LAYER_IN_MEMORY", "1")
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
    return os.environ["AGENTSITE_VAR_DIR"]


@dataclass
class BenchWorld:
    """A team with its owner ("bench"), a demo provider, an agent and a conversation; ``client``
    is a test client signed in as the owner."""

    team: Any
    user: Any
    provider: Any
    agent: Any
    conversation: Any
    client: Any


def bench_world() -> BenchWorld:
    """The rows every benchmark starts from (after ``setup_django``)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from agents.models import Agent, Conversation, Provider
    from agentsite.models import Membership, Team

    team = Team.objects.create(name="Bench")
    user = get_user_model().objects.create_user("bench", password="bench-pass-123")
    Membership.objects.create(team=team, user=user, role="owner")
    provider = Provider.objects.create(team=team, name="Demo", kind="demo")
    agent = Agent.objects.create(team=team, name="Bench agent", provider=provider, model="demo")
    conversation = Conversation.objects.create(team=team, agent=agent, created_by=user)
    client = Client()
    client.force_login(user)
    return BenchWorld(team, user, provider, agent, conversation, client)
