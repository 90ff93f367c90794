"""Signing in to an MCP server that needs it (OAuth 2.1, the MCP authorization spec), through
the SDK's client auth support.

``sign_in_start`` runs the SDK's whole flow in this process's sign-in thread (one event loop,
``RUNNER``): a connection to the server, answered 401; the SDK finds the protected-resource
metadata and the authorization server's, registers this site as a client (dynamic client
registration, kept encrypted on the server's row for later sign-ins) unless an admin entered a
pre-registered client, and builds the authorization URL (PKCE with S256, ``state``, the RFC
8707 resource, the scopes). ``sign_in_start`` returns that URL for the browser. The flow then
waits, up to ``SIGN_IN_WAIT_S``, for the code: the callback view (``sign_in_finish``, in
whichever web process the browser reaches) stores it on the sign-in row, the flow takes it
from there, the SDK checks ``state`` and the issuer (RFC 9207) and exchanges the code with the
verifier, and the storage (``oauth.RowStorage``) encrypts the tokens into the row. Every
request of the flow goes through the outbound-network policy (the connection's
``GuardedBridge``).

``sign_out`` revokes the tokens at the authorization server when it offers revocation
(RFC 7009) and deletes them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx2
from django.db.models import F
from django.utils import timezone
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata

from agents.models import McpServer, McpSignIn
from agents.runtime.tools import ToolError
from agentsite.crypto import SecretUnreadable, decrypt, encrypt
from agentsite.db import releasing
from agentsite.loop_thread import LoopThread

from .connection import connect, explain, short
from .credentials import PREREGISTERED, SignInFailed, client_store
from .oauth import Provider, RowStorage, client_info, client_metadata
from .transport import GuardedBridge
from .types import Endpoint

logger = logging.getLogger(__name__)

SIGN_IN_WAIT_S = 600.0  # how long a sign-in under way waits for the person to come back
START_WAIT_S = 30.0  # how long starting one waits for the authorization URL
FINISH_WAIT_S = 30.0  # how long the callback waits for the tokens
POLL_S = 0.2  # how often the callback looks for the sign-in's end
# How often a sign-in under way looks for its code: at once at first, then less and less (a
# sign-in left unfinished costs a few hundred reads, not thousands).
CODE_POLL_S, CODE_POLL_MAX_S = 0.2, 3.0
UNKNOWN_SIGN_IN = "This sign-in is unknown or has expired; start it again."


# This process's sign-in thread: one event loop where sign-ins under way wait.
RUNNER = LoopThread("mcp-sign-in")


def sign_in_start(*, server: McpServer, endpoint: Endpoint, user: Any, redirect_uri: str) -> str:
    """Start signing in to ``server`` for ``endpoint.sign_in`` (the team's or ``user``'s own);
    the authorization URL to send the browser to. ``SignInFailed`` says why there is none."""
    ref = endpoint.sign_in
    assert ref is not None
    info = client_info(server)
    if info is not None and info.software_id != PREREGISTERED \
            and [str(u) for u in info.redirect_uris or ()] != [redirect_uri]:
        # Registered dynamically for another address of this site: register again.
        client_store(server, None)
        McpServer.objects.filter(pk=server.pk).update(oauth_client_encrypted="")
    row, _ = McpSignIn.objects.get_or_create(server=server, user_id=ref.user_id)
    McpSignIn.objects.filter(pk=row.pk).update(state="", code_encrypted="", last_error="",
                                               started_by=user, started_at=timezone.now())
    url_ready: concurrent.futures.Future[str | None] = concurrent.futures.Future()
    RUNNER.submit(_flow(endpoint, row.pk, client_metadata(server, redirect_uri), url_ready))
    try:
        url = url_ready.result(timeout=START_WAIT_S)
    except concurrent.futures.TimeoutError as exc:
        raise SignInFailed(f"The server did not lead to a sign-in page within {START_WAIT_S:g} s.") from exc
    if url is None:
        raise SignInFailed("The server answered without asking for a sign-in: it needs none.")
    return url


async def _flow(endpoint: Endpoint, row_pk: int, metadata: OAuthClientMetadata,
                url_ready: concurrent.futures.Future[str | None]) -> None:
    ref = endpoint.sign_in
    assert ref is not None
    state = ""

    async def redirect(url: str) -> None:
        nonlocal state
        state = (parse_qs(urlparse(url).query).get("state") or [""])[0]
        await asyncio.to_thread(releasing(_pending), row_pk, state)
        url_ready.set_result(url)

    async def callback() -> AuthorizationCodeResult:
        deadline = time.monotonic() + SIGN_IN_WAIT_S
        pause = CODE_POLL_S
        while time.monotonic() < deadline:
            got = await asyncio.to_thread(releasing(_code), row_pk, state)
            if got is not None:
                return got
            await asyncio.sleep(pause)
            pause = min(pause * 1.1, CODE_POLL_MAX_S)
        raise SignInFailed(f"Nobody came back from the sign-in page within {SIGN_IN_WAIT_S:g} s.")

    storage = RowStorage(ref)
    provider = Provider(endpoint.url, metadata, storage, redirect_handler=redirect,
                        callback_handler=callback)
    try:
        async with connect(endpoint, SIGN_IN_WAIT_S, auth=provider):
            pass  # connected with the new token: signed in
    except BaseException as exc:  # noqa: BLE001 - reported to the person, whatever it was
        message = _failure(endpoint, exc)
        await asyncio.to_thread(releasing(_ended), row_pk, state, message)
        if not url_ready.done():
            url_ready.set_exception(SignInFailed(message))
        return
    await asyncio.to_thread(releasing(_ended), row_pk, state, "")
    if not url_ready.done():
        url_ready.set_result(None)


def _failure(endpoint: Endpoint, exc: BaseException) -> str:
    leaves = [exc]
    while leaves and isinstance(leaves[0], BaseExceptionGroup):
        leaves = list(leaves[0].exceptions)
    leaf = leaves[0] if leaves else exc
    if isinstance(leaf, SignInFailed):
        return str(leaf)
    explained = explain(endpoint, exc)
    text = str(explained) if isinstance(explained, ToolError) else f"{type(leaf).__name__}: {leaf}"
    return short(text, 500)


def _pending(row_pk: int, state: str) -> None:
    McpSignIn.objects.filter(pk=row_pk).update(state=state[:200], code_encrypted="", last_error="")


def _code(row_pk: int, state: str) -> AuthorizationCodeResult | None:
    row = McpSignIn.objects.filter(pk=row_pk).values("state", "code_encrypted", "last_error").first()
    if row is None or row["state"] != state:
        raise SignInFailed("The sign-in was started again or removed.")
    if row["last_error"]:
        raise SignInFailed(row["last_error"])
    if not row["code_encrypted"]:
        return None
    answer = json.loads(decrypt(row["code_encrypted"]))
    return AuthorizationCodeResult(code=answer["code"], state=state, iss=answer.get("iss"))


def _ended(row_pk: int, state: str, error: str) -> None:
    """The sign-in of ``state`` ended (``error``: why it failed); nothing when the row has moved
    on to a sign-in started again since."""
    values: dict[str, Any] = {"state": "", "code_encrypted": "", "last_error": error}
    if not error:
        values.update(signed_in_at=timezone.now(), refreshed_at=None, signed_in_by=F("started_by"))
    McpSignIn.objects.filter(pk=row_pk, state=state[:200]).update(**values)


def sign_in_finish(*, state: str, user: Any, code: str = "", iss: str | None = None,
                   error: str = "") -> McpSignIn:
    """The authorization server sent the browser back (``code``, or ``error``): hand the code to
    the sign-in waiting for it and wait for its end. The row, signed in; ``SignInFailed``
    otherwise."""
    row = McpSignIn.objects.filter(state=state).select_related("server").first() if state else None
    if row is None or row.started_by_id != getattr(user, "pk", None):
        raise SignInFailed(UNKNOWN_SIGN_IN)
    if error or not code:
        refused = f"The authorization server did not grant access ({short(error or 'no code', 200)})."
        McpSignIn.objects.filter(pk=row.pk, state=state).update(last_error=refused)
        raise SignInFailed(refused)
    McpSignIn.objects.filter(pk=row.pk, state=state).update(
        code_encrypted=encrypt(json.dumps({"code": code, "iss": iss})))
    deadline = time.monotonic() + FINISH_WAIT_S
    while time.monotonic() < deadline:
        row.refresh_from_db()
        if not row.state:
            if row.last_error:
                raise SignInFailed(row.last_error)
            return row
        time.sleep(POLL_S)
    raise SignInFailed("The sign-in did not finish in time (the process that started it may "
                       "have stopped); start it again.")


# -- signing out ----------------------------------------------------------------------------------
def sign_out(row: McpSignIn, endpoint: Endpoint) -> bool:
    """Forget ``row``'s tokens, revoking them first at the authorization server when it offers
    revocation; whether the server confirmed the revocation."""
    revoked = False
    try:
        session = json.loads(row.tokens_json()) if row.tokens_encrypted else {}
    except (SecretUnreadable, ValueError):
        session = {}
    endpoint_url = (session.get("metadata") or {}).get("revocation_endpoint")
    info = client_info(row.server)
    token = (session.get("token") or {})
    if endpoint_url and info is not None:
        revoked = all(_revoke(endpoint_url, info, token[kind], hint)
                      for kind, hint in (("refresh_token", "refresh_token"),
                                         ("access_token", "access_token")) if token.get(kind))
    row.delete()
    return revoked


def _revoke(url: str, info: OAuthClientInformationFull, token: str, hint: str) -> bool:
    data = {"token": token, "token_type_hint": hint, "client_id": info.client_id or ""}
    if info.client_secret and info.token_endpoint_auth_method != "none":  # noqa: S105
        data["client_secret"] = info.client_secret

    async def post() -> int:
        async with httpx2.AsyncClient(transport=GuardedBridge(), timeout=10.0, trust_env=False) as http:
            return (await http.post(url, data=data)).status_code

    try:
        return asyncio.run(post()) == 200
    except Exception as exc:  # noqa: BLE001 - the tokens are forgotten anyway
        logger.warning("MCP sign-out: revocation at %s failed: %s", url, type(exc).__name__)
        return False
