"""Calls to MCP servers that need sign-in: OAuth 2.1 as the MCP authorization spec has it,
through the SDK's client auth support (``OAuthClientProvider``, an ``httpx2`` auth).

A server whose admin chose a sign-in (``McpServer.sign_in``) is reached with the SDK's provider
(``auth_for``) and a storage (``RowStorage``) that reads the sign-in's row once per connection:
the team's, or that of the person whose turn it is. A valid access token goes as
``Authorization: Bearer``; one past its expiry is refreshed first, once (the SDK's refresh
grant; the new tokens, rotated refresh token included, are encrypted back into the row); with
no token, or when the refresh is refused, the call fails with ``SignInNeeded``, which says who
must sign in and where. Tokens never reach a step, a trace, an export or a log. Signing in is
``sign_in``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import ValidationError

from agents.models import McpServer, McpSignIn
from agents.runtime.tools import ToolError
from agentsite.crypto import SecretUnreadable, encrypt
from agentsite.db import releasing

from .credentials import CLIENT_NAME, client_record, client_store
from .types import Endpoint, SignInRef

ADOPT_TRIES, ADOPT_WAIT_S = 5, 2.0  # a refused refresh: how long to look for tokens renewed meanwhile

logger = logging.getLogger(__name__)


class SignInNeeded(ToolError):
    """A call to a server that needs sign-in, without a usable token."""


def needed_message(ref: SignInRef, server_name: str) -> str:
    if ref.personal:
        return (f"MCP server “{server_name}” needs your own sign-in, which is missing or no "
                f"longer valid: sign in at {ref.url} and try again.")
    return (f"MCP server “{server_name}” needs the team's sign-in, which is missing or no "
            f"longer valid: a team admin signs in at {ref.url}.")


# -- what is stored -------------------------------------------------------------------------------
def client_info(server: McpServer) -> OAuthClientInformationFull | None:
    record = client_record(server)
    try:
        return OAuthClientInformationFull.model_validate(record) if record else None
    except ValidationError:
        return None


def client_metadata(server: McpServer, redirect_uri: str) -> OAuthClientMetadata:
    return OAuthClientMetadata(client_name=CLIENT_NAME, redirect_uris=[redirect_uri],
                               grant_types=["authorization_code", "refresh_token"],
                               response_types=["code"], token_endpoint_auth_method="client_secret_post",  # noqa: S106
                               application_type="web", scope=server.oauth_scope.strip() or None)


class RowStorage:
    """The SDK's ``TokenStorage`` over a sign-in row (``ref``: the team's or a person's) and the
    server's client registration, read once. Besides the tokens, the row keeps what the SDK
    discovered (the authorization server's metadata, the resource's), so a refresh
    goes to the right token endpoint for the right resource after a restart."""

    def __init__(self, ref: SignInRef) -> None:
        self.ref = ref
        self.server_id, self.user_id = ref.server_id, ref.user_id
        self.provider: Provider | None = None
        self._loaded: tuple[dict[str, Any], OAuthClientInformationFull | None, float | None] | None = None

    def forget(self) -> None:
        """Read the row again next time (another connection may have renewed the tokens)."""
        self._loaded = None

    async def load(self) -> tuple[dict[str, Any], OAuthClientInformationFull | None, float | None]:
        if self._loaded is None:
            self._loaded = await asyncio.to_thread(releasing(self._read))
        return self._loaded

    def _read(self) -> tuple[dict[str, Any], OAuthClientInformationFull | None, float | None]:
        server = McpServer.objects.only("pk", "oauth_client_encrypted").get(pk=self.server_id)
        row = None if self.ref.personal and self.user_id is None else \
            McpSignIn.objects.filter(server_id=self.server_id, user_id=self.user_id).first()
        session: dict[str, Any] = {}
        if row is not None and row.tokens_encrypted:
            try:
                session = json.loads(row.tokens_json())
            except (SecretUnreadable, ValueError):
                session = {}
        expiry = row.expires_at.timestamp() if row is not None and row.expires_at else None
        return session, client_info(server), expiry

    async def get_tokens(self) -> OAuthToken | None:
        session, _, _ = await self.load()
        try:
            return OAuthToken.model_validate(session["token"]) if session.get("token") else None
        except ValidationError:
            return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        context = self.provider.context if self.provider else None
        session = {"token": tokens.model_dump(mode="json", exclude_none=True)}
        if context is not None:
            for key, value in (("metadata", context.oauth_metadata),
                               ("resource_metadata", context.protected_resource_metadata)):
                if value is not None:
                    session[key] = value.model_dump(mode="json", exclude_none=True)
            session["auth_server_url"] = context.auth_server_url
        await asyncio.to_thread(releasing(self._write_tokens), session, tokens)

    def _write_tokens(self, session: dict[str, Any], tokens: OAuthToken) -> None:
        now = timezone.now()
        expires = now + timedelta(seconds=tokens.expires_in) if tokens.expires_in else None
        with transaction.atomic():
            row, _ = McpSignIn.objects.select_for_update().get_or_create(
                server_id=self.server_id, user_id=self.user_id)
            refreshing = bool(row.tokens_encrypted) and not row.state
            row.tokens_encrypted = encrypt(json.dumps(session))
            row.expires_at, row.scope = expires, (tokens.scope or "")[:500]
            if refreshing:
                row.refreshed_at = now
            row.last_error = ""
            row.save()

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        _, info, _ = await self.load()
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await asyncio.to_thread(releasing(self._write_client), client_info)

    def _write_client(self, info: OAuthClientInformationFull) -> None:
        server = McpServer.objects.only("pk", "oauth_client_encrypted").get(pk=self.server_id)
        client_store(server, info.model_dump(mode="json", exclude_none=True))
        McpServer.objects.filter(pk=server.pk).update(oauth_client_encrypted=server.oauth_client_encrypted)


class Provider(OAuthClientProvider):
    """The SDK's provider, which also knows when the stored access token expires and what was
    discovered when it was got (so it refreshes an expired token before a call instead of
    waiting for a 401, to the right token endpoint)."""

    storage: RowStorage

    def __init__(self, server_url: str, metadata: OAuthClientMetadata, storage: RowStorage,
                 **handlers: Any) -> None:
        super().__init__(server_url, metadata, storage, **handlers)
        self.storage = storage
        storage.provider = self

    async def _initialize(self) -> None:
        await super()._initialize()
        session, _, expiry = await self.storage.load()
        context = self.context
        context.token_expiry_time = expiry
        try:
            if session.get("metadata"):
                context.oauth_metadata = OAuthMetadata.model_validate(session["metadata"])
            if session.get("resource_metadata"):
                context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
                    session["resource_metadata"])
        except ValidationError:
            context.oauth_metadata = context.protected_resource_metadata = None
        context.auth_server_url = session.get("auth_server_url") or None

    async def _handle_refresh_response(self, response: Any) -> bool:
        """The SDK's, and when the authorization server refused the refresh: another
        connection may just have renewed the tokens (an authorization server that rotates
        refresh tokens takes each once), so the stored ones are read again, a few times over
        ``ADOPT_WAIT_S``, and used when they are newer and valid."""
        stale = self.context.current_tokens
        if await super()._handle_refresh_response(response):
            return True
        for _ in range(ADOPT_TRIES):
            self.storage.forget()
            tokens, (_, _, expiry) = await self.storage.get_tokens(), await self.storage.load()
            if tokens is not None and (stale is None or tokens.access_token != stale.access_token) \
                    and (expiry is None or expiry > time.time()):
                self.context.current_tokens, self.context.token_expiry_time = tokens, expiry
                return True
            await asyncio.sleep(ADOPT_WAIT_S / ADOPT_TRIES)
        return False


def auth_for(endpoint: Endpoint) -> Provider:
    """The auth of a call's connection to ``endpoint`` (which has a ``sign_in``): never starts
    a sign-in; raises ``SignInNeeded`` when one is needed."""
    ref = endpoint.sign_in
    assert ref is not None

    async def no_person(_url: str) -> None:
        raise SignInNeeded(needed_message(ref, endpoint.name))

    async def no_callback() -> AuthorizationCodeResult:  # never reached: no_person raises
        raise SignInNeeded(needed_message(ref, endpoint.name))

    # The redirect URI only matters for signing in, which a call never does.
    metadata = OAuthClientMetadata(redirect_uris=["http://localhost/"], client_name=CLIENT_NAME)
    return Provider(endpoint.url, metadata, RowStorage(ref),
                    redirect_handler=no_person, callback_handler=no_callback)


