"""Signing in to an MCP server that needs it (OAuth, the MCP authorization spec), against an
authorization server and protected MCP server written with the SDK's own server auth support
(``oauth_server``): the sign-in through the site's pages, the authorization server's redirect
and back (discovery, dynamic client registration, PKCE); calls in real turns carrying the
team's or each person's token; an expired token refreshed once; sign-out revoking; and no
token anywhere a person or a receiver could read it."""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse
from django.utils import timezone
from mcp.shared.auth import OAuthClientInformationFull

from agents.chat.services import conversation_create
from agents.models import McpServer, McpSignIn, Tool
from agents.tools.mcp.connection import connect
from agents.tools.mcp.endpoints import endpoint_for
from agents.tools.mcp.services import mcp_server_save
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.members import member_of
from traces.models import Step, StepPayload, Trace

from .oauth_server import InMemoryAuthority, protected_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def authority() -> InMemoryAuthority:
    return InMemoryAuthority()


@pytest.fixture(scope="module")
def protected_url(authority) -> Iterator[str]:
    with protected_server(authority) as url:
        yield url


def server_for(team, url: str, sign_in: str) -> McpServer:
    return McpServer.objects.create(team=team, name="vault", transport="http", url=url,
                                    default_policy="allow", sign_in=sign_in)


def sign_in(client, server: McpServer) -> dict[str, list[str]]:
    """Sign in as a person does: the button, the authorization server (which approves at once
    and sends the browser back), the callback. The authorization request's parameters."""
    url = sign_in_url(client, server)
    asked = parse_qs(urlparse(url).query)
    back = httpx.get(url, follow_redirects=False)  # the authorization server
    assert back.status_code == 302
    callback = urlparse(back.headers["location"])
    assert callback.path == reverse("mcp_sign_in_callback")
    done = client.get(f"{callback.path}?{callback.query}")
    assert done.status_code == 302
    return asked


def sign_in_url(client, server: McpServer) -> str:
    """The authorization URL the sign-in page moves the browser on to."""
    start = client.post(reverse("mcp_sign_in", args=[server.uuid]))
    page = start.content.decode()
    found = re.search(r'id="sign-in-continue" href="([^"]+)"', page)
    assert found, [m.message for m in start.context["messages"]]
    url = html.unescape(found.group(1))
    assert f'content="0;url={found.group(1)}"' in page
    return url


def call_whoami(agent, user, team) -> Step:
    conversation = conversation_create(agent=agent, membership=member_of(user, team))
    trace = turn_start(conversation=conversation, membership=member_of(user, conversation),
                       text="call the vault_whoami tool 1 times")
    assert turn_run(trace.pk) == "completed"
    return trace.steps.get(kind="tool_call")


def output(step: Step) -> str:
    return step.payloads.get(kind="output").content


def test_a_team_admin_signs_in_and_every_turn_carries_the_teams_token(
        client_for, alice, bob, team_a, make_agent, loopback, protected_url, authority, sent_turns,
        use_redis):
    server = server_for(team_a, protected_url, "team")
    asked = sign_in(client_for(alice), server)
    # The SDK's flow: PKCE with S256, a state, the resource the token is for.
    assert asked["code_challenge_method"] == ["S256"] and asked["state"][0]
    assert asked["resource"] == [protected_url] and asked["redirect_uri"] == [
        "http://testserver" + reverse("mcp_sign_in_callback")]
    row = McpSignIn.objects.get(server=server)
    assert row.user is None and row.signed_in and row.signed_in_by == alice and not row.state
    # Registered dynamically, once; the tools were fetched with the new token.
    server.refresh_from_db()
    assert server.oauth_client_encrypted and len(authority.clients) >= 1
    tool = Tool.objects.get(team=team_a, name="vault_whoami")
    # Encrypted at rest: no token in the clear in the database.
    issued = [t for t in authority.access if t in row.tokens_json()]
    assert issued and not any(t in row.tokens_encrypted for t in issued)

    agent = make_agent(name="Keeper", tools=())
    agent.tools.add(tool)
    first = call_whoami(agent, bob, team_a)  # bob's turn, with the team's sign-in
    assert first.success is True and "signed in as person-" in output(first), output(first)

    # The access token expires (at the server and by the expiry it was issued with): the next
    # call refreshes it once and goes through.
    authority.expire_all()
    McpSignIn.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    refreshed = authority.refreshed
    again = call_whoami(agent, alice, team_a)
    assert again.success is True and output(again) == output(first), output(again)
    assert authority.refreshed == refreshed + 1
    row.refresh_from_db()
    assert row.refreshed_at is not None and row.expires_at is not None

    # No token in any step, payload or trace.
    tokens = [t for t in [*authority.access, *authority.refresh] if t]
    stored = " ".join([*StepPayload.objects.values_list("content", flat=True),
                       *(str(s.meta) for s in Step.objects.all()),
                       *(str(t.meta) for t in Trace.objects.all())])
    assert not any(t in stored for t in tokens)


def test_per_person_each_signs_in_and_calls_carry_their_own_token(
        client_for, alice, bob, team_a, make_agent, loopback, protected_url, sent_turns, use_redis):
    server = server_for(team_a, protected_url, "person")
    sign_in(client_for(alice), server)
    assert McpSignIn.objects.get(server=server).user == alice
    agent = make_agent(name="Keeper", tools=())
    agent.tools.add(Tool.objects.get(team=team_a, name="vault_whoami"))

    mine = call_whoami(agent, alice, team_a)
    assert mine.success is True
    # bob has not signed in: his call fails and says where to sign in; nothing of alice's is used.
    his = call_whoami(agent, bob, team_a)
    assert his.success is False
    assert "needs your own sign-in" in output(his)
    assert reverse("mcp_sign_in", args=[server.uuid]) in output(his)
    # The chat offers bob the sign-in; once made, it is not offered again.
    chat = conversation_create(agent=agent, membership=member_of(bob, team_a))
    link = reverse("mcp_sign_in", args=[server.uuid])
    page = client_for(bob).get(reverse("conversation", args=[chat.uuid])).content.decode()
    assert "you have not signed in yet" in page and link in page
    sign_in(client_for(bob), server)
    page = client_for(bob).get(reverse("conversation", args=[chat.uuid])).content.decode()
    assert "you have not signed in yet" not in page
    his = call_whoami(agent, bob, team_a)
    assert his.success is True and output(his) != output(mine)


def test_signing_out_revokes_the_tokens_and_calls_need_a_new_sign_in(
        client_for, alice, team_a, make_agent, loopback, protected_url, authority, sent_turns,
        use_redis):
    server = server_for(team_a, protected_url, "team")
    client = client_for(alice)
    sign_in(client, server)
    revoked = len(authority.revoked)
    response = client.post(reverse("mcp_sign_out", args=[server.uuid]), follow=True)
    assert "the server revoked the tokens" in response.content.decode()
    assert len(authority.revoked) > revoked and not McpSignIn.objects.filter(server=server).exists()
    agent = make_agent(name="Keeper", tools=())
    agent.tools.add(Tool.objects.get(team=team_a, name="vault_whoami"))
    step = call_whoami(agent, alice, team_a)
    assert step.success is False and "a team admin signs in" in output(step)


def test_who_may_sign_in(client_for, alice, bob, charlie, team_a, loopback, protected_url):
    team = server_for(team_a, protected_url, "team")
    assert client_for(bob).post(reverse("mcp_sign_in", args=[team.uuid])).status_code == 403
    assert client_for(charlie).get(reverse("mcp_sign_in", args=[team.uuid])).status_code == 404
    page = client_for(alice).get(reverse("mcp_sign_in", args=[team.uuid])).content.decode()
    assert "one account for the whole team" in page and "Not signed in" in page
    plain = McpServer.objects.create(team=team_a, name="plain", transport="http", url=protected_url)
    assert client_for(alice).get(reverse("mcp_sign_in", args=[plain.uuid])).status_code == 404


def test_a_callback_belongs_to_the_person_who_started_it(client_for, alice, bob, team_a, loopback,
                                                         protected_url):
    server = server_for(team_a, protected_url, "person")
    url = sign_in_url(client_for(alice), server)
    back = urlparse(httpx.get(url, follow_redirects=False).headers["location"])
    # bob's browser brings alice's code back: refused, and alice is not signed in by it.
    answer = client_for(bob).get(f"{back.path}?{back.query}", follow=True).content.decode()
    assert "unknown or has expired" in answer
    assert not McpSignIn.objects.filter(server=server, user=bob).exists()
    # The authorization server's refusal is said plainly.
    state = parse_qs(back.query)["state"][0]
    refused = client_for(alice).get(reverse("mcp_sign_in_callback"), {
        "state": state, "error": "access_denied"}, follow=True).content.decode()
    assert "did not grant access (access_denied)" in refused
    assert not McpSignIn.objects.get(server=server, user=alice).signed_in


def test_the_admin_page_shows_the_sign_in_and_takes_a_preregistered_client(
        client_for, alice, team_a, loopback, protected_url, authority):
    client = client_for(alice)
    response = client.post(reverse("admin:agents_mcpserver_add"), {
        "team": team_a.pk, "name": "vault", "transport": "http", "url": protected_url,
        "enabled": "on", "default_policy": "ask", "timeout_s": 10, "max_result_bytes": 5000,
        "ttl_s": 600, "sign_in": "team", "oauth_scope": "notes",
        "oauth_client_id": "registered-by-hand", "oauth_client_secret": "s3cret-value"})
    assert response.status_code == 302, response.content.decode()[:2000]
    server = McpServer.objects.get(team=team_a, name="vault")
    page = client.get(reverse("admin:agents_mcpserver_change", args=[server.pk])).content.decode()
    assert "Not signed in" in page and reverse("mcp_sign_in", args=[server.uuid]) in page
    assert "pre-registered, client ID “registered-by-hand”" in page and "s3cret-value" not in page
    assert "s3cret-value" not in server.oauth_client_encrypted
    # The authorization server knows the client (registered there by hand): the sign-in uses it
    # and registers nothing.
    authority.clients["registered-by-hand"] = OAuthClientInformationFull(
        client_id="registered-by-hand", client_secret="s3cret-value",
        redirect_uris=["http://testserver" + reverse("mcp_sign_in_callback")],
        token_endpoint_auth_method="client_secret_post", scope="notes")
    registered = len(authority.clients)
    asked = sign_in(client, server)
    assert asked["client_id"] == ["registered-by-hand"] and asked["scope"] == ["notes"]
    assert len(authority.clients) == registered and McpSignIn.objects.get(server=server).signed_in
    assert "Signed in by alice" in client.get(
        reverse("admin:agents_mcpserver_change", args=[server.pk])).content.decode()
    # Another URL: the token is never sent there; the sign-in is forgotten.
    server.url = protected_url.replace("/mcp", "/other")
    mcp_server_save(server=server)
    assert not McpSignIn.objects.filter(server=server).exists() and not server.oauth_client_encrypted


def test_connections_renewing_at_once_all_get_through(client_for, alice, team_a, loopback,
                                                      protected_url, authority):
    """The authorization server takes each refresh token once: of two connections renewing an
    expired token at the same moment, one is refused, and uses what the other stored."""
    server = server_for(team_a, protected_url, "team")
    sign_in(client_for(alice), server)
    authority.expire_all()
    McpSignIn.objects.filter(server=server).update(expires_at=timezone.now() - timedelta(seconds=1))
    refreshed = authority.refreshed
    endpoint = endpoint_for(server)

    async def whoami() -> str:
        async with connect(endpoint, 10) as connection:
            result = await connection.client.call_tool("whoami", {})
            return result.content[0].text

    async def both() -> list[str]:
        return await asyncio.gather(whoami(), whoami())

    answers = async_to_sync(both)()
    assert answers[0] == answers[1] and answers[0].startswith("signed in as person-")
    assert authority.refreshed == refreshed + 1  # one renewal; the other connection used it


def test_a_sign_in_started_again_is_the_one_that_counts(client_for, alice, team_a, loopback,
                                                        protected_url):
    server = server_for(team_a, protected_url, "person")
    client = client_for(alice)
    abandoned = sign_in_url(client, server)
    url = sign_in_url(client, server)  # started again: the first one gives up
    time.sleep(1.0)  # long enough for the first to notice, and end without touching the second
    back = urlparse(httpx.get(url, follow_redirects=False).headers["location"])
    assert client.get(f"{back.path}?{back.query}").status_code == 302
    assert McpSignIn.objects.get(server=server, user=alice).signed_in
    # The first one's code, brought back late, is refused.
    late = urlparse(httpx.get(abandoned, follow_redirects=False).headers["location"])
    answer = client.get(f"{late.path}?{late.query}", follow=True).content.decode()
    assert "unknown or has expired" in answer
