"""Every route, every outsider: a matrix over all URL patterns (walked from the resolver, so a
route added tomorrow is covered tomorrow) and websocket routes, for four personas —
anonymous, charlie (another team's owner), vera (a viewer of the team) and bob (a member) —
against alice's PRIVATE conversation, its trace and message, and team A's objects.

The expectations, in one table (``EXPECTED``), by what a route's URL names:

* a team-A object the persona may not see answers exactly as a missing object does (same
  status, same redirect): nothing tells an id that exists from one that does not;
* anonymous people are sent to the login page (or refused) everywhere but the public routes;
* nothing is ever a 500, and no page shown to them contains alice's private conversation's
  title or message (a canary);
* alice, the positive control, gets her pages (so the ids are real and the rows prove it).
"""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import sync_to_async
from django.apps import apps
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from agents.models import Attachment, Conversation, McpServer
from agentsite import services
from agentsite.api_keys import api_key_create
from agentsite.models import Membership
from agentsite.routing import websocket_urlpatterns
from tests.helpers import communicator, session_cookie
from tests.members import member_of

pytestmark = pytest.mark.django_db

CANARY = "CANARY-7f3a private plans"
PERSONAS = ("anonymous", "charlie", "vera", "bob")

# -- the table -------------------------------------------------------------------------------
# What each kind of route answers to each persona. "missing": exactly what a missing object
# gets. "login": a redirect to the login page (405 for a POST-only route is fine too).
# "any": not a 500 and no canary (the persona's own pages: lists, forms, their own team).
PRIVATE_OBJECT = {"anonymous": "login", "charlie": "missing", "vera": "missing", "bob": "missing"}
TEAM_OBJECT = {"anonymous": "login", "charlie": "missing", "vera": "refused", "bob": "refused"}
OWN_PAGES = {"anonymous": "login", "charlie": "any", "vera": "any", "bob": "any"}
PUBLIC = {"anonymous": "any", "charlie": "any", "vera": "any", "bob": "any"}
ADMIN_OBJECT = {"anonymous": "login", "charlie": "missing", "vera": "login", "bob": "login"}
ADMIN_PAGES = {"anonymous": "login", "charlie": "any", "vera": "login", "bob": "login"}
# An object the whole team may read (an agent, through the API).
TEAM_READ = {"anonymous": "login", "charlie": "missing", "vera": "any", "bob": "any"}

PUBLIC_ROUTES = {"login", "signup", "healthz", "favicon.ico", "invitation_accept", "logout",
                 "admin:login", "admin:logout", "password_reset", "password_reset_done",
                 "password_reset_confirm", "password_reset_complete",
                 "api:openapi-json", "api:openapi-view", "docs", "docs_page"}
KWARG_KIND = {  # URL keyword -> which expectation rows of the table apply
    "conversation_uuid": PRIVATE_OBJECT, "trace_uuid": PRIVATE_OBJECT, "message_uuid": PRIVATE_OBJECT,
    "attachment_uuid": PRIVATE_OBJECT, "key_uuid": PRIVATE_OBJECT,
    # the API's (with each persona's own key instead of a session)
    "conversation_id": PRIVATE_OBJECT, "trace_id": PRIVATE_OBJECT, "response_id": PRIVATE_OBJECT,
    "agent_id": TEAM_READ, "model": TEAM_READ,
    "invitation_uuid": TEAM_OBJECT, "membership_uuid": TEAM_OBJECT, "tool_uuid": TEAM_OBJECT,
    "server_uuid": TEAM_OBJECT,  # an MCP server's team sign-in (team admins only)
    "object_id": ADMIN_OBJECT, "id": ADMIN_OBJECT,
}
# Keywords that only qualify another object's URL (the step of a trace, the payload kind...).
QUALIFIERS = {"seq": 1, "kind": "output", "call_id": "call-1", "number": 1, "uidb64": "MQ", "token": None,
              "content_type_id": None, "app_label": None, "url": None, "rest": "nothing",
              "path": "index.html"}


def _walk(patterns, prefix="", namespace=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = f"{namespace}{p.namespace}:" if p.namespace else namespace
            yield from _walk(p.url_patterns, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), (namespace + p.name) if p.name else str(p.pattern), p


ROUTES = sorted({name: (route, p) for route, name, p in _walk(get_resolver().url_patterns)}.items())


def _keywords(pattern) -> set[str]:
    return set(pattern.pattern.converters) | set(pattern.pattern.regex.groupindex)


def expectation(name: str, keywords: set[str]) -> dict[str, str]:
    if name in PUBLIC_ROUTES:
        return PUBLIC
    if name.startswith("admin:") or "url" in keywords:
        return ADMIN_OBJECT if keywords & {"object_id", "id"} else ADMIN_PAGES
    for keyword, row in KWARG_KIND.items():
        if keyword in keywords:
            return row
    return OWN_PAGES


def test_every_route_has_a_row():
    unknown = []
    for name, (route, pattern) in ROUTES:
        keywords = _keywords(pattern)
        if keywords - set(KWARG_KIND) - set(QUALIFIERS):
            unknown.append(f"{name} ({route}): keywords {sorted(keywords)}")
    assert not unknown, "Add these keywords to KWARG_KIND or QUALIFIERS:\n" + "\n".join(unknown)


# -- the world ---------------------------------------------------------------------------------
@pytest.fixture
def world(alice, bob, vera, charlie, agent, team_a):
    from traces.sample import make_sample_trace

    conversation = Conversation.objects.create(team=team_a, agent=agent, created_by=alice, title=CANARY)
    trace = make_sample_trace(conversation=conversation, user=alice, steps=4)
    message = conversation.messages.create(role="user", text=CANARY, blocks=[{"type": "text", "text": CANARY}],
                                           author=alice)
    owner = Membership.objects.get(user=alice, team=team_a)
    issued = services.invitation_create(actor=owner, role="member")
    key, _secret = api_key_create(membership=member_of(alice, team_a), name=CANARY, scopes=["chat"])
    # Each persona's own key, with every scope its role allows, for the API's routes.
    keys = {user.username: api_key_create(membership=member_of(user, team), name="matrix", scopes=scopes)[1]
            for user, team, scopes in ((bob, team_a, ["chat", "traces:read", "costs:read"]),
                                       (vera, team_a, ["traces:read", "costs:read"]),
                                       (charlie, charlie.memberships.get().team,
                                        ["chat", "traces:read", "costs:read", "config:admin"]))}
    image = Attachment.objects.create(team=team_a, conversation=conversation, uploaded_by=alice,
                                      media_type="image/png", size=len(CANARY), data=CANARY.encode())
    return {"conversation_uuid": conversation.uuid, "trace_uuid": trace.uuid, "message_uuid": message.uuid,
            "attachment_uuid": image.uuid,
            "invitation_uuid": issued.invitation.uuid, "token": issued.token,
            "membership_uuid": Membership.objects.get(user=bob).uuid, "team": team_a,
            "tool_uuid": agent.tools.first().uuid, "id": alice.pk, "key_uuid": key.uuid,
            "server_uuid": McpServer.objects.create(team=team_a, name="matrix", transport="http", sign_in="team",
                                                    url="https://mcp.example.com/mcp").uuid,
            "conversation_id": conversation.uuid, "trace_id": trace.uuid, "agent_id": agent.uuid,
            "model": agent.slug, "response_id": f"resp_{trace.uuid.hex}",
            "keys": keys}


def _admin_instance(name: str, team):
    # admin:<app>_<model>_<action>
    app_model = name.split(":", 1)[1].rsplit("_", 1)[0]
    for model in apps.get_models():
        if f"{model._meta.app_label}_{model._meta.model_name}" == app_model:
            fields = {f.name for f in model._meta.get_fields()}
            if "team" in fields:
                return model._default_manager.filter(team=team).first()
            if model._meta.model_name == "team":
                return team
    return None


def _url(name: str, pattern, world, *, missing: bool = False) -> str | None:
    keywords = list(pattern.pattern.converters) or list(pattern.pattern.regex.groupindex)
    if "url" in keywords:
        return "/admin/no-such-page/"  # the admin's catch-all
    if pattern.name is None:
        return "/" + str(pattern.pattern).lstrip("^").rstrip("$")
    kwargs = {}
    for keyword in keywords:
        if keyword in QUALIFIERS and QUALIFIERS[keyword] is not None:
            kwargs[keyword] = QUALIFIERS[keyword]
        elif keyword == "token":
            kwargs[keyword] = "x" * 43 if missing else world["token"]
        elif keyword == "object_id":
            instance = _admin_instance(name, world["team"])
            if instance is None:
                return None
            kwargs[keyword] = str(instance.pk + 10**9 if missing else instance.pk)
        elif keyword == "id":  # a user account: alice's
            kwargs[keyword] = str(10**9 if missing else world["id"])
        elif keyword in ("content_type_id", "app_label"):
            return None  # the admin's own helpers (view-on-site, app index): tested on their own
        else:
            kwargs[keyword] = uuid.uuid4() if missing else world[keyword]
    return reverse(name, kwargs=kwargs)


def _client(persona: str, users: dict, *, key: str | None = None) -> Client:
    """A persona's session, or for the API's routes their key (``key``)."""
    if key is not None:
        return Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    client = Client()
    if persona != "anonymous":
        client.force_login(users[persona])
    return client


def _check(client, method, url, missing_url, rule, name):
    response = getattr(client, method)(url)
    body = response.content.decode("utf-8", "replace") if not getattr(response, "streaming", False) else ""
    unavailable_ok = name == "healthz" and response.status_code == 503  # no workers in the tests
    assert response.status_code < 500 or unavailable_ok, f"{method.upper()} {name}: {response.status_code}"
    assert CANARY not in body, f"{method.upper()} {name} shows alice's private conversation"
    location = response.get("Location", "")
    # The API answers without redirects: 401 without a key, and a body it cannot read (the
    # matrix posts a form) is a 400 before any object is looked up, for a missing one alike.
    refused = (302, 400, 401, 403, 404, 405) if name.startswith("api:") else (302, 403, 404, 405)
    if rule == "login":
        assert response.status_code in refused, f"{method.upper()} {name}: {response.status_code}"
        if response.status_code == 302:
            assert "login" in location, f"{method.upper()} {name} redirects to {location}"
    elif rule == "missing" and missing_url:
        other = getattr(client, method)(missing_url)
        assert response.status_code == other.status_code, (
            f"{method.upper()} {name}: {response.status_code} for team A's object, "
            f"{other.status_code} for a missing one")
        assert response.status_code in refused, f"{method.upper()} {name}: {response.status_code}"
    elif rule == "refused":
        assert response.status_code in refused, f"{method.upper()} {name}: {response.status_code}"


@pytest.mark.parametrize("persona", PERSONAS)
def test_the_matrix(world, persona, alice, bob, vera, charlie):
    users = {"alice": alice, "bob": bob, "vera": vera, "charlie": charlie}
    checked = 0
    for name, (_route, pattern) in ROUTES:
        rule = expectation(name, _keywords(pattern))[persona]
        url = _url(name, pattern, world)
        if url is None:
            continue
        missing_url = _url(name, pattern, world, missing=True)
        for method in ("get", "post"):
            if name in ("logout", "admin:logout") or (method == "post" and rule in ("any",)):
                continue  # acting on one's own pages is what the other tests are for
            key = world["keys"].get(persona, "") if name.startswith("api:") else None
            _check(_client(persona, users, key=key), method, url, missing_url, rule, name)
            checked += 1
    assert checked > 100


def test_alice_reaches_her_own_objects(world, alice):
    client = _client("alice", {"alice": alice})
    for name in ("conversation", "trace_detail", "trace_steps_chunk", "trace_export", "step_detail",
                 "members"):
        _, pattern = dict(ROUTES)[name]
        assert client.get(_url(name, pattern, world)).status_code == 200, name


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("close_thread_connections")
async def test_websockets_refuse_outsiders_and_admit_the_owner(world, alice, bob, vera, charlie):
    paths = {"conversation": f"/ws/conversations/{world['conversation_uuid']}/",
             "trace": f"/ws/traces/{world['trace_uuid']}/",
             "team": f"/ws/team/{world['team'].uuid}/"}
    assert {str(p.pattern) for p in websocket_urlpatterns} >= {"ws/conversations/<uuid:uuid>/",
                                                                "ws/traces/<uuid:uuid>/", "ws/team/<uuid:team_uuid>/"}
    for user, allowed in ((None, set()), (charlie, set()), (vera, {"team"}), (bob, {"team"}),
                          (alice, {"conversation", "trace", "team"})):
        cookie = await sync_to_async(session_cookie)(user) if user else None
        for what, path in paths.items():
            ws = communicator(path, cookie=cookie)
            connected, _ = await ws.connect()
            assert connected == (what in allowed), (user, what)
            if connected:
                await ws.disconnect()
