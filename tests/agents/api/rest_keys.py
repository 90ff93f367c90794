"""Helpers of the REST API's tests: a test client that sends a team API key."""

from __future__ import annotations

from django.test import AsyncClient, Client

from agentsite.api_keys import api_key_create
from tests.members import member_of

ALL_SCOPES = ("chat", "traces:read", "costs:read", "config:admin")


def key_client(user, team, scopes=ALL_SCOPES, *, name: str = "tests", **options) -> Client:
    """A client whose every request carries a new key of ``user`` in ``team`` with ``scopes``
    (and ``options`` of ``api_key_create``); the key is ``client.key``."""
    key, secret = api_key_create(membership=member_of(user, team), name=name, scopes=list(scopes), **options)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    client.key = key
    return client


class KeyAsyncClient(AsyncClient):
    """``AsyncClient`` sending a key with every GET (its own ``headers`` reach the view under
    another name)."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self.auth = {"Authorization": f"Bearer {secret}"}

    async def get(self, path, data=None, **extra):
        return await super().get(path, data, headers=self.auth, **extra)


def async_key_client(user, team, scopes=ALL_SCOPES) -> KeyAsyncClient:
    key, secret = api_key_create(membership=member_of(user, team), name="tests", scopes=list(scopes))
    client = KeyAsyncClient(secret)
    client.key = key
    return client


def error_of(response) -> dict:
    """The error of an answer, which always has OpenAI's shape."""
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]
