"""What is stored about signing in to MCP servers, without the SDK (which ``oauth`` and
``sign_in`` import): the OAuth client this site is at a server's authorization server (a
record of the SDK's ``OAuthClientInformationFull`` fields, encrypted on the server's row: it
may hold a client secret), the servers of an agent that need each person's own sign-in, and
who has not signed in to them yet."""

from __future__ import annotations

import json
from typing import Any

from agents.models import McpServer, McpSignIn
from agentsite.crypto import SecretUnreadable, decrypt, encrypt

CLIENT_NAME = "agentsite"
PREREGISTERED = "preregistered"  # the software_id kept on a client an admin entered


class SignInFailed(Exception):
    """Signing in did not work; the message says why, for the person."""


def client_record(server: McpServer) -> dict[str, Any] | None:
    """The server's OAuth client as stored; None when there is none (or it cannot be read)."""
    if not server.oauth_client_encrypted:
        return None
    try:
        record = json.loads(decrypt(server.oauth_client_encrypted))
    except (SecretUnreadable, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("client_id") else None


def client_store(server: McpServer, record: dict[str, Any] | None) -> None:
    server.oauth_client_encrypted = encrypt(json.dumps(record)) if record else ""


def preregistered_client(client_id: str, client_secret: str, redirect_uri: str) -> dict[str, Any]:
    """A client an admin registered at the authorization server themselves."""
    record: dict[str, Any] = {
        "client_id": client_id, "redirect_uris": [redirect_uri],
        "token_endpoint_auth_method": "client_secret_post" if client_secret else "none",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "client_name": CLIENT_NAME, "software_id": PREREGISTERED}
    if client_secret:
        record["client_secret"] = client_secret
    return record


def personal_servers(agent: Any) -> list[McpServer]:
    """The servers whose tools ``agent`` uses that need each person's own sign-in."""
    return list(McpServer.objects.filter(team_id=agent.team_id, enabled=True, tools__agents=agent,
                                         sign_in=McpServer.SignIn.PERSON)
                .distinct().only("pk", "uuid", "name").order_by("name"))


def sign_ins_missing(servers: list[McpServer], user: Any) -> list[McpServer]:
    """Those of ``servers`` (``personal_servers``) ``user`` has not signed in to: the chat
    offers the sign-in (no query when there are none)."""
    if not servers:
        return []
    done = set(McpSignIn.objects.filter(server__in=servers, user=user).exclude(tokens_encrypted="")
               .values_list("server_id", flat=True))
    return [s for s in servers if s.pk not in done]
