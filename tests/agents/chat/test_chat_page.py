"""What the conversation page puts at hand: the sidebar (search, pinned, by day), the agent's
description and starters on an empty chat, the model picker, the "/" palette, copy buttons."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

from django.core.cache import cache
from django.core.cache.utils import make_template_fragment_key
from django.db import connection
from django.middleware.csrf import _unmask_cipher_token
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.chat import selectors
from agents.chat.markdown import ALLOWED_TAGS
from agents.chat.services import conversation_create
from agents.models import Conversation
from agents.runtime.commands import command_list
from tests.members import member_of
from traces.models import Feedback, Trace


def page(client, conversation) -> str:
    response = client.get(reverse("conversation", args=[conversation.uuid]))
    assert response.status_code == 200
    return response.content.decode()


def titled(agent, user, title, **fields) -> Conversation:
    c = conversation_create(agent=agent, membership=member_of(user, agent.team), title=title)
    if fields:
        Conversation.objects.filter(pk=c.pk).update(**fields)
        c.refresh_from_db()
    return c


def test_an_untitled_conversation_is_named_after_its_agent(conversation):
    assert str(conversation) == "New conversation with Helper"


def test_the_sidebar_lists_the_persons_conversations_pinned_first_then_by_day(client_for, alice, bob, agent):
    now = timezone.now()
    old = titled(agent, alice, "Quarterly numbers", updated_at=now - timedelta(days=12))
    titled(agent, alice, "Yesterday's plan", updated_at=now - timedelta(days=1))
    pinned = titled(agent, alice, "Runbook", updated_at=now - timedelta(days=40), pinned=True)
    titled(agent, bob, "Bob's secret")
    html = page(client_for(alice), old)
    sidebar = html[html.index('id="chat-sidebar"'):html.index("</aside>")]
    order = [sidebar.index(t) for t in ("Pinned", "Runbook", "Yesterday", "Yesterday&#x27;s plan",
                                         "Previous 30 days", "Quarterly numbers")]
    assert order == sorted(order)
    assert "Bob&#x27;s secret" not in sidebar
    assert f'href="{reverse("conversation", args=[old.uuid])}" aria-current="page"' in sidebar
    assert [label for label, _ in selectors.conversation_groups(
        selectors.conversation_list(membership=alice.memberships.get()))][0] == "Pinned"
    assert pinned.pinned


def test_the_kept_sidebar_follows_a_rename_an_agents_new_name_and_the_conversation_on_screen(
        client_for, alice, agent):
    """The sidebar's list is kept rendered (``{% cache %}``) under what it shows: a renamed
    conversation, its agent renamed, or another conversation opened shows at once."""
    first, second = titled(agent, alice, "First title"), titled(agent, alice, "Second title")
    client = client_for(alice)

    def sidebar(conversation) -> str:
        html = page(client, conversation)
        return html[html.index('id="chat-sidebar"'):html.index("</aside>")]

    def current(conversation) -> str:
        return f'href="{reverse("conversation", args=[conversation.uuid])}" aria-current="page"'

    assert current(first) in sidebar(first) and current(second) not in sidebar(first)
    assert current(second) in sidebar(second) and current(first) not in sidebar(second)
    Conversation.objects.filter(pk=second.pk).update(title="Renamed")
    assert "Renamed" in sidebar(first) and "Second title" not in sidebar(first)
    agent.name = "Renamed agent"
    agent.save()
    assert "Renamed · Renamed agent" in sidebar(first)


def test_the_sidebar_search_answers_with_its_list_only(client_for, alice, agent):
    titled(agent, alice, "Kubernetes upgrade")
    titled(agent, alice, "Holiday plans")
    response = client_for(alice).get(reverse("chat") + "?q=kubern", HTTP_HX_REQUEST="true",
                                     HTTP_HX_TARGET="sidebar-list")
    html = response.content.decode()
    assert html.lstrip().startswith('<nav id="sidebar-list"')
    assert "Kubernetes upgrade" in html and "Holiday plans" not in html


def test_only_the_owner_pins(client_for, alice, bob, vera, agent):
    mine = titled(agent, bob, "Bob's")
    url = reverse("conversation_pin", args=[mine.uuid])
    assert client_for(vera).post(url, {"pinned": "1"}).status_code in (403, 404)
    client_for(bob).post(url, {"pinned": "1"})
    mine.refresh_from_db()
    assert mine.pinned
    client_for(bob).post(url, {"pinned": "0"})
    mine.refresh_from_db()
    assert not mine.pinned


def test_an_empty_chat_shows_the_agent_and_its_starters(client_for, alice, make_agent):
    agent = make_agent(name="Researcher", description="Cites <b>sources</b>.",
                       suggested_prompts=["What is 6 * 7?"])
    html = page(client_for(alice), conversation_create(agent=agent, membership=member_of(alice, agent.team)))
    assert "Cites &lt;b&gt;sources&lt;/b&gt;." in html
    assert 'class="inline starter-form"' in html and 'value="What is 6 * 7?"' in html


def test_the_model_picker_switches_like_model_does(client_for, alice, vera, make_agent, sent_turns):
    agent = make_agent(name="Picky", allowed_models=["demo-fast"])
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    html = page(client_for(alice), conversation)
    assert 'id="model-picker"' in html and '<option value="demo-fast">' in html
    url = reverse("conversation_model", args=[conversation.uuid])
    assert client_for(vera).post(url, {"model": "demo-fast"}).status_code in (403, 404)
    response = client_for(alice).post(url, {"model": "demo-fast"}, follow=True)
    conversation.refresh_from_db()
    assert conversation.model_override == "demo-fast"
    assert "This conversation now uses demo-fast." in response.content.decode()
    client_for(alice).post(url, {"model": "gpt-9000"})
    conversation.refresh_from_db()
    assert conversation.model_override == "demo-fast"  # not one of the agent's models: unchanged
    client_for(alice).post(url, {"model": "demo"})
    conversation.refresh_from_db()
    assert conversation.model_override == ""


def test_no_picker_when_the_agent_has_one_model(client_for, alice, conversation):
    assert 'id="model-picker"' not in page(client_for(alice), conversation)


def test_the_palette_lists_every_command_and_messages_have_copy_buttons(client_for, alice, conversation,
                                                                       sample_trace):
    html = page(client_for(alice), conversation)
    user_message = sample_trace.user_message
    assert f'data-copy-all="#message-{user_message.uuid.hex} .bubble"' in html
    unescaped = html.replace("&lt;", "<").replace("&gt;", ">")
    for usage, what in command_list():
        assert f'data-command="{usage}"' in unescaped and what in unescaped
    assert len(command_list()) >= 5 and ("/stop", "stop the reply that is being written") in command_list()


def test_the_streaming_renderer_gets_the_servers_allowlist(client_for, alice, conversation):
    html = page(client_for(alice), conversation)
    policy = json.loads(html.split('<script id="md-policy" type="application/json">')[1].split("</script>")[0])
    assert set(policy["tags"]) == ALLOWED_TAGS and "img" not in policy["tags"] and "script" not in policy["tags"]
    assert policy["schemes"] == ["http", "https", "mailto"]
    assert "vendor/purify" in html and "vendor/markdown-it" in html


def _turn_html(html: str, trace) -> str:
    start = html.index(f'id="answer-{trace.uuid.hex}"')
    return html[start:html.index("</li>", start)]


def test_a_finished_turn_is_rendered_once_per_session_and_never_served_stale_or_to_another(
        client_for, alice, bob, conversation, sample_trace):
    """The chat keeps a finished turn's HTML (``TurnView.render_key``): what is in it must
    change with the turn, and one reader's copy (their rating, their session's CSRF token)
    never reaches another."""
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    trace = sample_trace
    alice_client, bob_client = client_for(alice), client_for(bob)
    first = page(alice_client, conversation)
    turns = selectors.chat_view(conversation, reader=alice).turns
    key = make_template_fragment_key("chat-turn", [turns[0].render_key, False,
                                                   alice_client.cookies["csrftoken"].value])
    assert cache.get(key) is not None  # kept after the first view
    # Served from there: its forms' masked tokens, fresh on every rendering, are the same.
    assert _turn_html(page(alice_client, conversation), trace) == _turn_html(first, trace)
    assert "csrfmiddlewaretoken" in _turn_html(first, trace)

    # A re-pricing, a rating and archiving each show on the next view.
    Trace.objects.filter(pk=trace.pk).update(cost_usd=Decimal("12.5"))
    assert "· $12.5 ·" in _turn_html(page(alice_client, conversation), trace)
    Feedback.objects.create(team=trace.team, trace=trace, user=alice, rating=Feedback.Rating.UP)
    assert 'aria-pressed="true"' in _turn_html(page(alice_client, conversation), trace)
    rated = _turn_html(page(alice_client, conversation), trace)
    Conversation.objects.filter(pk=conversation.pk).update(archived=True)
    assert "Regenerate" in rated and "Regenerate" not in _turn_html(page(alice_client, conversation), trace)
    Conversation.objects.filter(pk=conversation.pk).update(archived=False)

    # Bob reads the same turn: not alice's rating, and forms with his own session's token.
    html = page(bob_client, conversation)
    assert 'aria-pressed="true"' not in _turn_html(html, trace)
    tokens = re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert tokens and {_unmask_cipher_token(t) for t in tokens} == {bob_client.cookies["csrftoken"].value}
    assert bob_client.cookies["csrftoken"].value != alice_client.cookies["csrftoken"].value


def _messages(html: str) -> str:
    start = html.index('<ol id="messages"')
    return html[start:html.index("</ol>", start)]


def test_a_finished_branch_is_served_kept_until_anything_it_shows_changes(
        client_for, alice, bob, conversation, sample_trace):
    """A branch whose turns have ended is kept rendered (``agents.chat.kept_branch``): the next
    view reads neither its messages nor its tool calls and shows the same HTML; a new turn, a
    rating, a running turn or another reader's session each get it rendered afresh."""
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    alice_client = client_for(alice)
    page(alice_client, conversation)  # the first view sets the session's CSRF cookie
    with CaptureQueriesContext(connection) as first_reads:
        first = page(alice_client, conversation)
    with CaptureQueriesContext(connection) as kept_reads:
        again = page(alice_client, conversation)
    assert _messages(again) == _messages(first)
    read = [q["sql"] for q in kept_reads.captured_queries]
    assert not [q for q in read if q.startswith(('SELECT "agents_message"', 'SELECT "traces_step"'))], read
    assert [q for q in first_reads.captured_queries if q["sql"].startswith('SELECT "traces_step"')]
    assert len(read) < len(first_reads.captured_queries)

    # A rating (the reader's own) and a re-pricing show on the next view.
    Feedback.objects.create(team=sample_trace.team, trace=sample_trace, user=alice,
                            rating=Feedback.Rating.UP)
    assert 'aria-pressed="true"' in _messages(page(alice_client, conversation))
    Trace.objects.filter(pk=sample_trace.pk).update(cost_usd=Decimal("7.25"))
    assert "· $7.25 ·" in _messages(page(alice_client, conversation))
    # Bob's view is his own: no rating of his, his session's tokens.
    bobs = _messages(page(client_for(bob), conversation))
    assert 'aria-pressed="true"' not in bobs and "$7.25" in bobs

    # A turn that runs is never kept: each view renders it afresh (its forms' tokens are masked
    # anew at every rendering, where the kept copy above came back identical).
    Trace.objects.filter(pk=sample_trace.pk).update(status=Trace.Status.RUNNING)
    assert _messages(page(alice_client, conversation)) != _messages(page(alice_client, conversation))
    view = selectors.chat_view(conversation, reader=alice, shown_with=("token", True))
    assert view.keep_as is None and view.html is None and view.turns
