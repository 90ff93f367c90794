"""MCP tools in a real browser: the operator's stdio time server (``mcp-server-time``) whose
calls ask a person — approved by one member, declined by another — with the MCP step in the
inspector; a team admin adds a Streamable-HTTP server (written with the SDK) in the admin,
tests it and lists its tools, hostile descriptions shown as text; another team sees none of it;
a server that needs sign-in (OAuth, written with the SDK's server auth support) signed in to
through its authorization server and back."""

from __future__ import annotations

import re
import subprocess
import sys

from agentsite.stack import ROOT
from tests.agents.tools.mcp.oauth_server import InMemoryAuthority, protected_server
from tests.agents.tools.mcp.servers import HOSTILE_DESCRIPTION, mcp_http_server
from tests.helpers import wait_for


def test_an_mcp_tool_that_asks_is_approved_by_one_member_and_declined_by_another(login):
    bob = login("bob")
    bob.open_chat_with("Clock")
    bob.send("What time is it in Tokyo?")
    waiting = bob.page.locator(".tool-card.state-waiting")
    waiting.wait_for()
    assert waiting.locator(".tool-name").inner_text() == "time_get_current_time"
    waiting.locator("button:has-text('Approve')").click()
    answer = bob.answers("completed").first
    answer.wait_for()
    assert re.search(r"The current time in Asia/Tokyo is \d{4}-\d\d-\d\dT", answer.locator(".md").inner_text())
    card = answer.locator(".tool-card.state-ok")
    card.locator("summary").click()
    assert "Approved by bob." in card.inner_text()
    assert '"timezone": "Asia/Tokyo"' in card.locator(".tool-pre").first.inner_text()

    # The inspector: the call is a tool step with the MCP server, tool, protocol and result.
    answer.locator("a.trace-link").click()
    bob.page.wait_for_url(re.compile(r"/traces/[0-9a-f-]+/$"))
    step = bob.page.locator("#steps li.step.k-tool_call").first
    step.locator("summary").click()
    body = step.locator(".step-body")
    body.locator("dt:has-text('MCP server')").wait_for()
    text = body.inner_text()
    assert "time" in text and "stdio" in text and "get_current_time" in text
    assert "protocol 2026-07-28" in text
    assert re.search(r"Permission\s+ask", text)
    assert not bob.watch.errors

    alice = login("alice")
    alice.open_chat_with("Clock")
    alice.send("What time is it in Tokyo?")
    alice.page.locator(".tool-card.state-waiting button:has-text('Deny')").click()
    declined = alice.answers("completed").first
    declined.wait_for()
    assert ("I did not run time_get_current_time: Declined by the conversation's owner"
            in declined.locator(".md").inner_text())
    assert declined.locator(".tool-card.state-denied .tool-state").inner_text() == "Denied"


def test_a_team_admin_adds_an_http_server_tests_it_and_another_team_sees_none_of_it(login):
    with mcp_http_server() as url:
        alice = login("alice")
        alice.page.goto(alice.stack.url + "/admin/agents/mcpserver/add/")
        team = alice.page.locator("select[name=team]")
        if team.count():
            team.select_option(label="Team A")
        alice.page.fill("input[name=name]", "echoes")
        alice.page.select_option("select[name=transport]", "http")
        alice.page.fill("input[name=url]", url)
        alice.page.click("input[name=_continue]")
        alice.page.wait_for_url(re.compile(r"/admin/agents/mcpserver/\d+/change/"))
        change_url = alice.page.url

        alice.page.click("button:has-text('Test')")
        alice.page.get_by_text("echo", exact=True).first.wait_for()
        page_text = alice.page.locator("#content").inner_text()
        assert "Repeats the text it is given." in page_text
        assert HOSTILE_DESCRIPTION in page_text  # shown as text, never run
        assert "2026-07-28" in page_text

        alice.page.goto(change_url)
        alice.page.click("button:has-text('Refresh tools')")
        alice.page.locator("#mcp-tools a:has-text('echoes_echo')").wait_for()
        tools = alice.page.locator("#mcp-tools").inner_text()
        assert "echoes_calculator" in tools and HOSTILE_DESCRIPTION in tools
        assert not alice.watch.dialogs and not alice.watch.errors

        charlie = login("charlie")
        response = charlie.page.goto(change_url)
        assert response.status == 404
        charlie.page.goto(charlie.stack.url + "/admin/agents/mcpserver/")
        listing = charlie.page.locator("#content").inner_text()
        assert "echoes" not in listing and "time" not in listing


def test_a_servers_prompts_are_starters_and_slash_commands_the_model_gets_in_full(login):
    s = login("alice")
    s.open_chat_with("Writer")  # uses the tools of "notes", a stdio server with two prompts
    starters = s.page.locator(".empty-chat .starters[aria-label^='Prompts']")
    # A prompt that needs arguments fills the composer and waits for them.
    starters.get_by_role("button", name="Greet someone…").click()
    assert s.page.input_value("#composer-text") == "/notes_greet "
    s.page.locator("#composer-text").press_sequentially('name="Ada Lovelace" tone=formal')
    s.page.press("#composer-text", "Enter")
    answer = s.answers("completed").first
    answer.wait_for()
    user = s.page.locator("li.message.role-user .bubble").first.inner_text()
    assert user.strip() == '/notes_greet name="Ada Lovelace" tone=formal'  # shown as typed
    # The demo model reflects what it was sent: the prompt's text, not the command.
    assert 'You said: "Write a formal greeting for Ada Lovelace.' in answer.locator(".md").inner_text()

    # The "/" palette lists them with the built-in commands; one without arguments runs at once.
    s.open_chat_with("Writer")
    s.page.fill("#composer-text", "/notes")
    s.page.dispatch_event("#composer-text", "input")
    palette = s.page.locator("#command-palette")
    palette.wait_for()
    shown = palette.locator("[role=option]:visible")
    assert shown.count() == 2 and "Greet someone (from notes)" in palette.inner_text()
    s.page.press("#composer-text", "Enter")  # the first: /notes_daily
    daily = s.answers("completed").first
    daily.wait_for()
    assert "What did you do yesterday?" in daily.locator(".md").inner_text()
    # A missing argument is answered in the chat, and nothing reaches the model.
    s.send("/notes_greet tone=warm")
    s.page.locator("li.notice").wait_for()
    assert "/notes_greet needs name." in s.page.locator("li.notice").inner_text()

    # A resource of the server, attached from the "+" menu, goes with the next message only.
    s.page.locator("details.attach-menu > summary").click()
    s.page.locator(".resource-option", has_text="notes://welcome").locator("input").check()
    chip, answer = sent_with_resources(s, "Summarize it", answers=2)
    assert chip == "Attached: welcome"
    # The demo model reflects what it was sent: the message, then the resource's contents.
    assert "Summarize it [Attached resource notes://welcome from the MCP server “notes”] Welcome to the test server." \
        in answer
    assert not s.page.locator("input[name=resources]:checked").count()

    # A resource template's box, begun with its fixed start: the URI typed into it is attached.
    s.page.locator("details.attach-menu > summary").click()
    box = s.page.locator(".resource-template input[name=template_uri]")
    assert box.input_value() == "notes://"
    box.fill("notes://groceries")
    chip, answer = sent_with_resources(s, "And this one", answers=3)
    assert chip == "Attached: notes://groceries"
    assert "[Attached resource notes://groceries from the MCP server “notes”] Note groceries" in answer
    assert box.input_value() == "notes://"  # the box is back to its start
    assert not s.watch.errors


def sent_with_resources(s, text: str, *, answers: int) -> tuple[str, str]:
    """Send ``text`` with what is chosen in the "+" menu; the message's chip and the text of
    its answer (the ``answers``-th of the conversation)."""
    s.send(text)
    sent = s.page.locator("li.message.role-user", has_text=text)
    sent.locator(".resource-chip").wait_for()
    wait_for(lambda: s.answers("completed").count() == answers, what=f"the answer to “{text}”")
    return (sent.locator(".resource-chip").inner_text(),
            s.answers("completed").nth(answers - 1).locator(".md").inner_text())


def test_a_team_admin_signs_in_to_a_server_that_needs_it_and_back(login):
    authority = InMemoryAuthority()
    with protected_server(authority) as url:
        alice = login("alice")
        page = alice.page
        page.goto(alice.stack.url + "/admin/agents/mcpserver/add/")
        team = page.locator("select[name=team]")
        if team.count():
            team.select_option(label="Team A")
        page.fill("input[name=name]", "vault")
        page.select_option("select[name=transport]", "http")
        page.fill("input[name=url]", url)
        page.select_option("select[name=sign_in]", "team")
        page.click("input[name=_continue]")
        page.wait_for_url(re.compile(r"/admin/agents/mcpserver/\d+/change/"))
        change_url = page.url
        assert "Not signed in." in page.locator("#content").inner_text()

        page.click("a[href*='/sign-in/']")
        page.locator("text=one account for the whole team").wait_for()
        page.click("button:has-text('Sign in')")
        # Through the authorization server (which approves at once) and back to the admin page.
        page.wait_for_url(change_url, timeout=30_000)
        text = page.locator("body").inner_text()
        assert "Signed in to “vault”; its tools were fetched again (1 in all)." in text
        assert "Signed in by alice" in text
        page.locator("#mcp-tools a:has-text('vault_whoami')").wait_for()
        assert len(authority.clients) == 1 and authority.access  # registered, and a token issued

        # The worker's call carries the team's token: an agent given the tool (set up outside
        # the browser) calls it in a chat.
        subprocess.run([sys.executable, "manage.py", "shell", "-c",
                        "from agents.models import Agent, Tool; Agent.objects.get(name='Writer')"
                        ".tools.add(Tool.objects.get(name='vault_whoami'))"],
                       env=alice.stack.env, cwd=ROOT, check=True, capture_output=True)
        alice.open_chat_with("Writer")
        alice.send("call the vault_whoami tool 1 times")
        alice.page.locator(".tool-card.state-waiting button:has-text('Approve')").click()  # "ask"
        answer = alice.answers("completed").first
        answer.wait_for()
        card = answer.locator(".tool-card.state-ok")
        card.locator("summary").click()
        assert "signed in as person-1" in card.inner_text()
        assert not any(token in alice.page.content() for token in authority.access)
        assert not alice.watch.errors
