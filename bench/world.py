"""The rows a benchmark starts from. Importing this module configures Django on a scratch
database first (``bench._django.setup_django``): the models below need it, so a benchmark that
imports it is configured by the import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench._django import setup_django

setup_django()

from django.contrib.auth import get_user_model  # noqa: E402 - Django is configured above
from django.test import Client  # noqa: E402

from agents.models import Agent, Conversation, Provider  # noqa: E402
from agentsite.api_keys import api_key_create  # noqa: E402
from agentsite.models import Membership, Team  # noqa: E402


@dataclass
class BenchWorld:
    """A team with its owner ("bench", and their ``membership``), a demo provider, an agent and a
    conversation; ``client`` is a test client signed in as the owner."""

    team: Any
    user: Any
    membership: Any
    provider: Any
    agent: Any
    conversation: Any
    client: Any

    def api_client(self, *scopes: str) -> Client:
        """A test client that sends an API key of the owner's with ``scopes``."""
        _, secret = api_key_create(membership=self.membership, name="bench", scopes=list(scopes))
        return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def bench_world() -> BenchWorld:
    team = Team.objects.create(name="Bench")
    user = get_user_model().objects.create_user("bench", password="bench-pass-123")
    membership = Membership.objects.create(team=team, user=user, role="owner")
    provider = Provider.objects.create(team=team, name="Demo", kind="demo")
    agent = Agent.objects.create(team=team, name="Bench agent", provider=provider, model="demo")
    conversation = Conversation.objects.create(team=team, agent=agent, created_by=user)
    client = Client()
    client.force_login(user)
    return BenchWorld(team, user, membership, provider, agent, conversation, client)


