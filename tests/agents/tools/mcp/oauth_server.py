"""An MCP server that needs sign-in, written with the SDK's own server auth support: one
``MCPServer`` that is both the authorization server (discovery metadata, dynamic client
registration, ``/authorize`` with PKCE, ``/token``, ``/revoke``, all the SDK's handlers) and the
protected resource (its Streamable HTTP endpoint answers 401 with a ``WWW-Authenticate`` that
points at its protected-resource metadata).

``InMemoryAuthority`` is the provider behind those handlers. Its ``/authorize`` approves at once
and sends the browser straight back to the client's redirect URI with a code, as an
authorization server does for a person already signed in there; each approval is a new
"person" (``subject``: ``person-1``, ``person-2``...) so tests can tell whose token a call
carried (the ``whoami`` tool answers it). ``access_ttl_s`` sets how long an access token lives,
so a test can let it expire and see the client refresh it.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from .servers import free_port, running

SCOPE = "notes"


@dataclass
class InMemoryAuthority:
    """The SDK's ``OAuthAuthorizationServerProvider``, in memory."""

    access_ttl_s: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    refreshed: int = 0  # refresh grants served
    revoked: list[str] = field(default_factory=list)
    _people: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [SCOPE], expires_at=time.time() + 300,
            client_id=client.client_id or "", code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource, subject=f"person-{next(self._people)}")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(client, authorization_code.scopes, authorization_code.resource,
                           authorization_code.subject)

    async def load_refresh_token(self, client: OAuthClientInformationFull,
                                 refresh_token: str) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client: OAuthClientInformationFull,
                                     refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)  # rotated
        self.refreshed += 1
        return self._issue(client, scopes or refresh_token.scopes, refresh_token.resource,
                           refresh_token.subject)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access.get(token)
        if access is None or (access.expires_at is not None and access.expires_at < time.time()):
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.revoked.append(token.token)
        self.access = {k: v for k, v in self.access.items() if v.subject != token.subject}
        self.refresh = {k: v for k, v in self.refresh.items() if v.subject != token.subject}

    def expire_all(self) -> None:
        """Every access token issued so far expires now (their refresh tokens stay good)."""
        for token in self.access.values():
            token.expires_at = int(time.time()) - 1

    def _issue(self, client: OAuthClientInformationFull, scopes: list[str], resource: str | None,
               subject: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.access[access] = AccessToken(token=access, client_id=client.client_id or "",
                                          scopes=scopes, resource=resource, subject=subject,
                                          expires_at=int(time.time()) + self.access_ttl_s)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client.client_id or "",
                                             scopes=scopes, resource=resource, subject=subject)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.access_ttl_s,
                          refresh_token=refresh, scope=" ".join(scopes))


def build_protected_server(authority: InMemoryAuthority, base_url: str) -> MCPServer:
    server = MCPServer(
        "protected-notes", auth_server_provider=authority,
        auth=AuthSettings(issuer_url=base_url, resource_server_url=f"{base_url}/mcp",
                          validate_token_resource=False, required_scopes=[SCOPE],
                          client_registration_options=ClientRegistrationOptions(
                              enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]),
                          revocation_options=RevocationOptions(enabled=True)))

    @server.tool(description="Who the caller signed in as.")
    def whoami() -> str:
        token = get_access_token()
        return f"signed in as {token.subject if token else 'nobody'}"

    return server


@contextmanager
def protected_server(authority: InMemoryAuthority) -> Iterator[str]:
    """The protected server on a free loopback port; yields its MCP URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running(build_protected_server(authority, base).streamable_http_app(), port) as url:
        yield url
