"""Hooks in a real turn (demo model, in this process): a webhook denies a tool call and the
model reads why, a command hook denies, a slow webhook only warns, message hooks rewrite, drop
and suppress. The hooks answer from a real signed-webhook server on loopback."""

from __future__ import annotations

import pytest

from agents.models import Hook, Message
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.agents.tools.hook_server import SECRET, serve_hooks
from tests.members import member_of
from traces.models import Step, StepPayload

pytestmark = pytest.mark.django_db(transaction=True)



@pytest.fixture
def hook_server(settings):
    with serve_hooks(settings) as server:
        yield server

def add_hook(team, url, *, event="PreToolUse", **fields) -> Hook:
    hook = Hook(team=team, name=fields.pop("name", "guard"), event=event, url=url, **fields)
    hook.set_secret(SECRET)
    hook.save()
    return hook


def messages_of(conversation) -> list[Message]:
    return list(Message.objects.filter(conversation=conversation).order_by("id"))


def tool_output(conversation) -> str:
    row = next(m for m in messages_of(conversation) if m.role == "tool")
    return row.blocks[0]["output"]


def test_a_webhook_denies_a_call_and_the_model_reads_why(conversation, alice, sent_turns, use_redis,
                                                          hook_server):
    hook_server.answer = lambda p: (200, {"decision": "deny", "message": "no maths today"})
    add_hook(conversation.team, hook_server.url, matcher="calculator")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+3")
    assert turn_run(trace.pk) == "completed"

    assert hook_server.bad_signatures == 0 and hook_server.received[0]["tool_name"] == "calculator"
    assert "Permission denied: no maths today" in tool_output(conversation)
    answer = messages_of(conversation)[-1].text
    assert "Permission denied: no maths today" in answer
    hook_steps = Step.objects.filter(trace=trace, kind="hook")
    assert hook_steps.count() == 1


def test_a_warning_webhook_lets_the_call_run(conversation, alice, sent_turns, use_redis, hook_server):
    hook_server.answer = lambda p: (200, {"decision": "warn", "message": "logged for review"})
    add_hook(conversation.team, hook_server.url)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+3")
    assert turn_run(trace.pk) == "completed"
    output = tool_output(conversation)
    assert output.startswith("5") and "Hook feedback:\nlogged for review" in output
    # The steps in the order things happened: the before-hook, then the call it let run.
    kinds = list(trace.steps.order_by("seq").values_list("kind", flat=True))
    assert kinds == ["llm_request", "hook", "tool_call", "llm_request"], kinds


def test_an_operator_command_that_exits_2_denies(conversation, alice, sent_turns, use_redis, settings):
    settings.HOOK_COMMANDS = {"guard": {"command": "cat >/dev/null; echo 'blocked by policy'; exit 2"}}
    Hook.objects.create(team=conversation.team, name="policy", event="PreToolUse", kind="command",
                        operator_key="guard")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+3")
    assert turn_run(trace.pk) == "completed"
    assert "Permission denied: blocked by policy" in tool_output(conversation)


def test_a_slow_webhook_times_out_and_the_turn_goes_on(conversation, alice, sent_turns, use_redis,
                                                        hook_server):
    hook_server.delay_s = 3
    add_hook(conversation.team, hook_server.url, timeout_s=0.5)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+3")
    assert turn_run(trace.pk) == "completed"
    output = tool_output(conversation)
    assert output.startswith("5") and "did not answer within 0.5 s" in output


def test_a_private_webhook_is_refused_at_run_time(conversation, alice, sent_turns, use_redis, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    add_hook(conversation.team, "https://10.9.8.7/hook")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+3")
    assert turn_run(trace.pk) == "completed"
    output = tool_output(conversation)
    assert output.startswith("5") and "private address" in output


# -- message hooks --------------------------------------------------------------------------------
def test_a_received_hook_rewrites_what_the_model_gets(conversation, alice, sent_turns, use_redis,
                                                       hook_server):
    hook_server.answer = lambda p: (200, {"content": "what is 4+4"})
    add_hook(conversation.team, hook_server.url, event="on_message_received")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+3")
    assert turn_run(trace.pk) == "completed"
    rows = messages_of(conversation)
    assert rows[0].text == "what is 2+3"  # stored as typed
    assert rows[-1].text == "4 + 4 = 8."
    assert hook_server.received[0]["content"] == "what is 2+3"
    assert hook_server.received[0]["sender"] == "alice"
    step = Step.objects.get(trace=trace, kind="hook")
    assert (step.iteration, step.meta["decision"], step.meta["event"]) == (
        0, "rewrite", "on_message_received")


def test_a_received_hook_drops_the_message(conversation, alice, sent_turns, use_redis, hook_server):
    hook_server.answer = lambda p: (200, {"decision": "deny", "message": "Off-topic for this agent."})
    add_hook(conversation.team, hook_server.url, event="on_message_received")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+3")
    assert turn_run(trace.pk) == "failed"
    trace.refresh_from_db()
    assert trace.error_kind == "hook" and "Off-topic for this agent." in trace.error
    assert not Step.objects.filter(trace=trace, kind="llm_request").exists()
    assert [m.role for m in messages_of(conversation)] == ["user"]
    assert Step.objects.get(trace=trace, kind="hook").meta["decision"] == "drop"


def test_a_sending_hook_rewrites_the_reply(conversation, alice, sent_turns, use_redis, hook_server):
    hook_server.answer = lambda p: (200, {"content": p["content"].replace("5", "five")})
    add_hook(conversation.team, hook_server.url, event="on_message_sending")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+3")
    assert turn_run(trace.pk) == "completed"
    trace.refresh_from_db()
    assert messages_of(conversation)[-1].text == "2 + 3 = five." == trace.answer
    assert messages_of(conversation)[-1].blocks[0] == {"type": "text", "text": "2 + 3 = five."}


def test_a_sending_hook_suppresses_the_reply(conversation, alice, sent_turns, use_redis, hook_server):
    hook_server.answer = lambda p: (200, {"decision": "deny", "message": "contains figures"})
    add_hook(conversation.team, hook_server.url, event="on_message_sending")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+3")
    assert turn_run(trace.pk) == "completed"
    last = messages_of(conversation)[-1]
    assert last.text == "The reply was withheld by a hook: contains figures"
    assert "2 + 3 = 5" not in str(last.blocks)
    # the trace keeps the original answer in its model request
    responses = StepPayload.objects.filter(step__trace=trace, kind="response").values_list("content", flat=True)
    assert any("2 + 3 = 5" in r for r in responses)
    trace.refresh_from_db()
    step = Step.objects.get(trace=trace, kind="hook")
    assert (step.iteration, step.meta["decision"]) == (trace.iterations, "suppress") == (2, "suppress")
    assert "contains figures" in step.error
