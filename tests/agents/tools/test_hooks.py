"""Webhooks and operator commands as hooks: signing, answers, the outbound policy, time
limits, which hooks an agent gets, and the admin (write-only secret, test event, scoping)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.chat.services import conversation_create
from agents.models import Hook
from agents.runtime.events import ToolFinished
from agents.runtime.hooks import (
    MESSAGE_SENDING,
    POST_TOOL_USE,
    PRE_TOOL_USE,
    ToolHooks,
    hook_payload,
    message_payload,
)
from agents.tools.hooks import WebhookHook, turn_message_hooks, turn_tool_hooks, webhook_url_problem
from agents.tools.hooks.build import HOOK_FEEDBACK_NOTE
from agents.tools.validation import CheckedTool
from agents.turns.builder import turn_setup_build
from agents.turns.services import turn_start
from agentsite.models import AuditEvent
from tests.agents.runtime.test_tool_policy import counting_tool, turn
from tests.agents.tools.hook_server import SECRET, serve_hooks
from tests.members import member_of

CALL = hook_payload(PRE_TOOL_USE, "calculator", '{"expression": "2+3"}')



@pytest.fixture
def hook_server(settings):
    with serve_hooks(settings) as server:
        yield server

def webhook(url: str, **fields) -> WebhookHook:
    return WebhookHook(name="guard", url=url, secret=fields.pop("secret", SECRET), **fields)


# -- the webhook ----------------------------------------------------------------------------------
async def test_a_signed_webhook_allows_denies_and_warns(hook_server):
    answers = iter([(200, {"decision": "deny", "message": "no maths today"}),
                    (200, {"decision": "warn", "message": "careful"}),
                    (200, {})])
    hook_server.answer = lambda payload: next(answers)
    hook = webhook(hook_server.url)

    denied = await hook.run(PRE_TOOL_USE, CALL)
    assert (denied.outcome, denied.messages, denied.detail) == ("deny", ["no maths today"], "HTTP 200")
    warned = await hook.run(PRE_TOOL_USE, CALL)
    assert (warned.outcome, warned.warn, warned.decision, warned.messages) == (
        "allow", True, "warn", ["careful"])
    allowed = await hook.run(PRE_TOOL_USE, CALL)
    assert (allowed.decision, allowed.messages) == ("allow", [])

    assert hook_server.bad_signatures == 0
    assert hook_server.received[0]["event"] == PRE_TOOL_USE
    assert hook_server.received[0]["tool_input"] == {"expression": "2+3"}


async def test_a_wrong_secret_is_caught_by_the_receiver(hook_server):
    run = await webhook(hook_server.url, secret="not-the-secret").run(PRE_TOOL_USE, CALL)
    assert run.outcome == "failed" and "HTTP 401" in run.messages[0]
    assert hook_server.bad_signatures == 1


@pytest.mark.parametrize(("status", "answer", "says"), [
    (500, {"decision": "allow"}, "answered HTTP 500"),
    (200, b"<html>oops</html>", "did not answer with a JSON object"),
    (200, {"decision": "maybe"}, "unknown decision"),
    (200, b"x" * 70_000, "more than 64 KB"),
])
async def test_a_bad_answer_fails_the_hook_with_a_clear_message(hook_server, status, answer, says):
    hook_server.answer = lambda payload: (status, answer)
    run = await webhook(hook_server.url).run(PRE_TOOL_USE, CALL)
    assert run.outcome == "failed" and says in run.messages[0], run.messages


async def test_what_a_bad_answer_began_with_is_scrubbed_before_it_is_cut(hook_server):
    # The key starts within the 80 characters shown and ends after them: cut first, it would
    # no longer look like a key and its start would be shown.
    key = "sk-proj-4fQ9xW2mZ7rT1vB8nK3pL6sD0hJ5gY2cX9eA7uI4oP1qR8tE3wS6zV0bN5mM2kL9jH4g"
    hook_server.answer = lambda payload: (200, f"Internal error, retry with key {key}".encode())
    run = await webhook(hook_server.url).run(PRE_TOOL_USE, CALL)
    assert run.outcome == "failed" and "[REDACTED" in run.messages[0], run.messages
    assert "4fQ9" not in run.messages[0]


async def test_a_slow_webhook_times_out_within_its_limit(hook_server):
    hook_server.delay_s = 3  # it would answer, after the limit
    run = await webhook(hook_server.url, timeout_s=0.5).run(PRE_TOOL_USE, CALL)
    assert (run.outcome, run.detail) == ("failed", "timeout")
    assert "did not answer within 0.5 s" in run.messages[0]


async def test_a_private_address_is_refused_at_run_time(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    for url in ("https://10.1.2.3/hook", "https://127.0.0.1:9/hook", "http://169.254.169.254/"):
        run = await webhook(url).run(PRE_TOOL_USE, CALL)
        assert (run.outcome, run.detail) == ("failed", "refused"), url
        assert "Refused" in run.messages[0] or "refused" in run.messages[0]


def test_the_url_is_checked_by_the_outbound_policy(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    assert "private" in webhook_url_problem("https://10.0.0.5/hook")
    assert "loopback" in webhook_url_problem("https://127.0.0.1/hook")
    assert "https" in webhook_url_problem("http://93.184.216.34/hook")
    assert webhook_url_problem("https://93.184.216.34/hook") is None
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    assert webhook_url_problem("http://127.0.0.1:8080/hook") is None


async def test_a_message_hook_can_rewrite(hook_server):
    hook_server.answer = lambda payload: (200, {"content": payload["content"].upper()})
    run = await webhook(hook_server.url).run(MESSAGE_SENDING, message_payload(MESSAGE_SENDING, "hi"))
    assert (run.outcome, run.content) == ("allow", "HI")


@pytest.mark.parametrize("answer", [
    {"tool_input": {"expression": "3*3"}},
    {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"expression": "3*3"}}},
])
async def test_a_before_tool_webhook_can_rewrite_the_calls_arguments(hook_server, answer):
    """The call runs with the arguments the hook answered (Claude Code's ``updatedInput``, or
    ``tool_input``); the step keeps what the model asked and what ran."""
    hook_server.answer = lambda payload: (200, answer)
    runs: list[dict] = []
    _, observer, results = await turn([counting_tool("calc", runs)],
                                      tool_hooks=ToolHooks(pre=[webhook(hook_server.url)]))
    assert runs == [{"expression": "3*3"}] and not results[0].is_error
    [finished] = observer.of(ToolFinished)
    assert finished.arguments == {"expression": "2+2"}  # what the model asked
    assert finished.meta["arguments_rewritten"] == '{"expression": "3*3"}'


@pytest.mark.parametrize(("answer", "says"), [
    ({"tool_input": {"expression": 9}}, "into ones it refuses: 'expression': 9 is not of type 'string'"),
    ({"tool_input": ["3*3"]}, "answered arguments that are not a JSON object"),
])
async def test_a_rewrite_the_tool_refuses_does_not_run(hook_server, answer, says):
    hook_server.answer = lambda payload: (200, answer)
    runs: list[dict] = []
    inner = counting_tool("calc", runs)
    inner.parameters = {"type": "object", "properties": {"expression": {"type": "string"}},
                        "required": ["expression"]}
    tool = CheckedTool(inner)
    _, observer, results = await turn([tool], tool_hooks=ToolHooks(pre=[webhook(hook_server.url)]))
    if "refuses" in says:  # refused by the tool's schema: the call fails, saying so
        assert runs == [] and results[0].is_error and says in results[0].output
    else:  # a malformed answer fails the hook, which only warns: the call runs as asked
        assert runs == [{"expression": "2+2"}] and says in results[0].output


# -- which hooks an agent gets ---------------------------------------------------------------------
def test_an_agent_gets_its_teams_enabled_hooks_in_order(make_agent, team_a, team_b, settings):
    settings.HOOK_COMMANDS = {"audit": {"command": "exit 0", "timeout_s": 3}}
    agent, other = make_agent(name="One"), make_agent(name="Two")
    second = Hook.objects.create(team=team_a, name="second", event=PRE_TOOL_USE, url="https://x.example/",
                                 position=2, matcher="calculator")
    Hook.objects.create(team=team_a, name="first", event=PRE_TOOL_USE, kind="command",
                        operator_key="audit", position=1)
    Hook.objects.create(team=team_a, name="off", event=PRE_TOOL_USE, url="https://x.example/", enabled=False)
    Hook.objects.create(team=team_a, name="gone", event=PRE_TOOL_USE, kind="command", operator_key="nope")
    Hook.objects.create(team=team_b, name="theirs", event=PRE_TOOL_USE, url="https://x.example/")
    only_two = Hook.objects.create(team=team_a, name="two only", event=POST_TOOL_USE, url="https://x.example/")
    only_two.agents.set([other])
    Hook.objects.create(team=team_a, name="on send", event=MESSAGE_SENDING, url="https://x.example/")
    second.set_secret("s3")
    second.save()

    hooks = turn_tool_hooks(agent)
    assert [h.name for h in hooks.pre] == ["first", "second"] and list(hooks.post) == []
    assert hooks.pre[0].kind == "command" and hooks.pre[0].timeout_s == 3
    assert hooks.pre[1].secret == "s3" and hooks.pre[1].matches("Calculator")
    assert not hooks.pre[1].matches("current_time")
    assert [h.name for h in turn_tool_hooks(other).post] == ["two only"]
    received, sending = turn_message_hooks(agent)
    assert received == [] and [h.name for h in sending] == ["on send"]


# -- the admin --------------------------------------------------------------------------------------
def add_data(team, **overrides):
    data = {"team": team.pk, "name": "guard", "event": PRE_TOOL_USE, "kind": "webhook",
            "url": "https://93.184.216.34/hook", "secret": SECRET, "operator_key": "",
            "matcher": "", "position": "0", "enabled": "on", "timeout_s": "5"}
    data.update(overrides)
    return data


def test_a_turn_with_tool_hooks_tells_the_model_their_feedback_is_not_to_quote(
        make_agent, team_a, alice, sent_turns):
    def prompt(agent) -> str:
        conversation = conversation_create(agent=agent, membership=member_of(alice, team_a))
        trace = turn_start(conversation=conversation, membership=member_of(alice, team_a), text="hi")
        return turn_setup_build(trace=trace).config.system_prompt

    hooked, plain = make_agent(name="Hooked", system_prompt="Be brief."), make_agent(name="Plain")
    assert prompt(hooked) == "Be brief."
    audit = Hook.objects.create(team=team_a, name="audit", event=PRE_TOOL_USE, url="https://x.example/")
    audit.agents.set([hooked])
    assert prompt(hooked) == f"Be brief.\n\n{HOOK_FEEDBACK_NOTE}"
    assert "Hook feedback" not in prompt(plain)  # its turns have no hook


def test_an_admin_adds_a_webhook_with_a_write_only_secret(client_for, alice, team_a):
    c = client_for(alice)
    response = c.post(reverse("admin:agents_hook_add"), add_data(team_a))
    assert response.status_code == 302, response.content.decode()[:3000]
    hook = Hook.objects.get()
    assert hook.secret() == SECRET and SECRET not in hook.secret_encrypted
    page = c.get(reverse("admin:agents_hook_change", args=[hook.pk])).content.decode()
    assert SECRET not in page and "A secret is stored" in page and "Send a test event" in page
    # an empty secret keeps the stored one
    c.post(reverse("admin:agents_hook_change", args=[hook.pk]), add_data(team_a, secret="", name="g2"))
    hook.refresh_from_db()
    assert (hook.name, hook.secret()) == ("g2", SECRET)
    event = AuditEvent.objects.filter(object_type="agents.Hook").latest("id")
    assert SECRET not in str(event.before) + str(event.after)


def test_a_private_url_is_refused_on_save(client_for, alice, team_a, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    response = client_for(alice).post(reverse("admin:agents_hook_add"),
                                      add_data(team_a, url="https://10.0.0.5/hook"))
    assert response.status_code == 200 and not Hook.objects.exists()
    assert "private address" in response.content.decode()


def test_a_command_hook_is_a_choice_of_the_operators_commands(client_for, alice, team_a, settings):
    settings.HOOK_COMMANDS = {"audit": {"command": "/bin/audit"}}
    c = client_for(alice)
    page = c.get(reverse("admin:agents_hook_add")).content.decode()
    assert '<option value="audit">' in page and "/bin/audit" not in page
    bad = c.post(reverse("admin:agents_hook_add"),
                 add_data(team_a, kind="command", url="", operator_key="rm -rf /"))
    assert bad.status_code == 200 and not Hook.objects.exists()
    good = c.post(reverse("admin:agents_hook_add"), add_data(team_a, kind="command", url="",
                                                             operator_key="audit"))
    assert good.status_code == 302
    assert Hook.objects.get().operator_key == "audit"


def test_the_test_event_button_runs_the_hook_and_shows_its_answer(client_for, alice, team_a, hook_server):
    hook_server.answer = lambda payload: (200, {"decision": "deny", "message": "<b>not today</b>"})
    hook = Hook.objects.create(team=team_a, name="guard", event=PRE_TOOL_USE, url=hook_server.url)
    hook.set_secret(SECRET)
    hook.save()
    response = client_for(alice).post(reverse("admin:agents_hook_test_event", args=[hook.pk]), follow=True)
    html = response.content.decode()
    assert response.status_code == 200
    assert "Test event PreToolUse: deny" in html and "&lt;b&gt;not today&lt;/b&gt;" in html
    assert "<b>not today</b>" not in html and "HTTP 200" in html and " ms" in html
    assert hook_server.received[0]["tool_name"] == "calculator"


def test_other_teams_cannot_reach_a_hook(client_for, charlie, alice, team_a, hook_server):
    hook = Hook.objects.create(team=team_a, name="guard", event=PRE_TOOL_USE, url=hook_server.url)
    c = client_for(charlie)
    assert c.get(reverse("admin:agents_hook_change", args=[hook.pk])).status_code == 404
    assert c.post(reverse("admin:agents_hook_test_event", args=[hook.pk])).status_code == 404
    assert hook_server.received == []
    assert "guard" not in c.get(reverse("admin:agents_hook_changelist")).content.decode()
