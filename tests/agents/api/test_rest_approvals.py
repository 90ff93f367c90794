"""Approvals and stops from code: ``GET /api/v1/traces/{id}/approvals``, ``POST
…/approvals/{call_id}`` and ``POST …/stop``, with the browser's role rules; a decision's
reason reaching the model; the waiting call told by the REST event stream and by a streamed
``/v1/chat/completions``. Real turns run in a thread of this process, as a worker thread runs
them (the official ``openai`` client against a live stack: tests/e2e/test_openai_approvals.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from agents.api import turn_stream
from agents.chat.services import conversation_create
from agents.models import Conversation, Message
from agents.turns.lifecycle import trace_claim
from agents.turns.services import turn_start
from agents.turns.signals import RedisApprover, TurnSignals
from agentsite.api_keys import api_key_create
from agentsite.models import Membership
from tests.agents.api.rest_keys import error_of, key_client
from tests.approvals import waiting_approval
from tests.helpers import wait_for
from tests.members import member_of
from traces.models import Step, StepPayload, Trace

pytestmark = pytest.mark.django_db(transaction=True)


def approvals(client, trace):
    return client.get(f"/api/v1/traces/{trace.uuid.hex}/approvals")


def decide(client, trace, call_id="call_1", **body):
    return client.post(f"/api/v1/traces/{trace.uuid.hex}/approvals/{call_id}", body,
                       content_type="application/json")


def stop(client, trace):
    return client.post(f"/api/v1/traces/{trace.uuid.hex}/stop")


def stored_decision(redis_url, trace, call_id="call_1"):
    value = redis.Redis.from_url(redis_url).get(f"agentsite:approval:{trace.uuid.hex}:{call_id}")
    return json.loads(value) if value is not None else None


@pytest.fixture
def waiting(sent_turns, use_redis):
    """``waiting(conversation, user)``: a running turn of ``conversation`` whose call
    ``call_1`` (the calculator, ``2+3``) waits for approval, recorded as a worker records it."""

    def make(conversation, user, call_id="call_1"):
        trace = turn_start(conversation=conversation, membership=member_of(user, conversation), text="What is 2 + 3?")
        trace_claim(trace_id=trace.pk, worker="w1")
        step = Step.objects.create(trace=trace, seq=1, kind="approval", status="waiting", name="calculator",
                                   call_id=call_id, started_at=timezone.now(), meta={"timeout_s": 300})
        StepPayload.objects.create(step=step, kind="arguments", content=json.dumps({"expression": "2+3"}))
        return Trace.objects.get(pk=trace.pk)

    return make


# -- listing --------------------------------------------------------------------------------------
def test_a_waiting_call_is_listed_with_its_tool_arguments_and_where_to_decide_it(conversation, alice, team_a,
                                                                                waiting):
    trace = waiting(conversation, alice)

    response = approvals(key_client(alice, team_a, ["chat"]), trace)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["trace"], body["status"]) == (trace.uuid.hex, "running")
    [approval] = body["data"]
    assert approval == {**approval, "call_id": "call_1", "tool": "calculator", "arguments": {"expression": "2+3"},
                        "timeout_s": 300,
                        "decide_url": f"http://testserver/api/v1/traces/{trace.uuid.hex}/approvals/call_1"}
    step = Step.objects.get(trace=trace, kind="approval")
    assert approval["waiting_since"].startswith(step.started_at.isoformat()[:19])
    assert approval["expires_at"] > approval["waiting_since"]


def test_the_list_takes_the_traces_scope_too_and_is_empty_once_the_turn_has_ended(conversation, alice, team_a,
                                                                                 waiting, sample_trace):
    trace = waiting(conversation, alice)

    assert len(approvals(key_client(alice, team_a, ["traces:read"]), trace).json()["data"]) == 1
    costs = approvals(key_client(alice, team_a, ["costs:read"]), trace)
    assert costs.status_code == 403 and error_of(costs)["code"] == "insufficient_scope"
    ended = approvals(key_client(alice, team_a, ["chat"]), sample_trace).json()
    assert ended == {"trace": sample_trace.uuid.hex, "status": "completed", "data": []}


# -- deciding -------------------------------------------------------------------------------------
def test_a_decision_is_handed_to_the_worker_with_its_reason(conversation, alice, team_a, waiting, use_redis):
    trace = waiting(conversation, alice)

    response = decide(key_client(alice, team_a, ["chat"]), trace, approved=False, reason="  Not on\n Fridays. ")

    assert response.status_code == 200, response.content
    assert response.json() == {"trace": trace.uuid.hex, "call_id": "call_1", "approved": False,
                               "reason": "Not on Fridays.",
                               "events_url": f"http://testserver/api/v1/traces/{trace.uuid.hex}/events"}
    assert stored_decision(use_redis, trace) == {"approved": False, "decided_by": "alice",
                                                 "role": "the conversation's owner", "reason": "Not on Fridays."}


async def test_the_worker_reads_the_reason_into_what_the_model_is_told():
    approver = RedisApprover(TurnSignals("redis://unused"), "trace")

    denied = approver._decision("c1", b'{"approved": false, "role": "a team admin", "reason": "Too costly."}')
    approved = approver._decision("c2", b'{"approved": true, "decided_by": "bob", "reason": "fine"}')
    plain = approver._decision("c3", b'{"approved": false, "role": "a team admin"}')

    assert (denied.approved, denied.reason) == (False, "declined by a team admin: Too costly")
    assert (approved.approved, approved.reason) == (True, "approved: fine")
    assert plain.reason == "declined by a team admin"


def test_a_call_that_does_not_wait_is_a_409(conversation, alice, team_a, waiting, sent_turns):
    trace = waiting(conversation, alice)
    client = key_client(alice, team_a, ["chat"])
    queued = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="later")

    for response in (decide(client, trace, "call_2", approved=True), decide(client, queued, approved=True)):
        assert response.status_code == 409
        error = error_of(response)
        assert error["code"] == "approval_not_waiting" and error["type"] == "conflict_error"
        assert "not waiting for approval any more" in error["message"]
    Step.objects.filter(trace=trace).update(status="ok")
    assert decide(client, trace, approved=True).status_code == 409


def test_a_bad_body_is_a_400_naming_the_field(conversation, alice, team_a, waiting):
    trace = waiting(conversation, alice)
    client = key_client(alice, team_a, ["chat"])

    for body, param in (({"reason": "no verdict"}, "approved"), ({"approved": False, "reason": "x" * 501}, "reason")):
        response = decide(client, trace, **body)
        assert response.status_code == 400 and error_of(response)["param"] == param


def test_a_decision_redis_did_not_take_is_a_503_to_retry(conversation, alice, team_a, waiting, monkeypatch):
    trace = waiting(conversation, alice)
    monkeypatch.setattr("agents.turns.approvals.approval_signal_send", lambda **kwargs: False)

    response = decide(key_client(alice, team_a, ["chat"]), trace, approved=True)

    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert error_of(response)["code"] == "decision_undelivered"


# -- who may --------------------------------------------------------------------------------------
def test_a_teammates_private_turn_is_a_404_and_another_teams_too(conversation, alice, bob, charlie, team_a,
                                                                 team_b, waiting, use_redis):
    trace = waiting(conversation, alice)

    for client in (key_client(bob, team_a, ["chat", "traces:read"]), key_client(charlie, team_b)):
        for response in (approvals(client, trace), decide(client, trace, approved=True), stop(client, trace)):
            assert response.status_code == 404, response.content
            assert error_of(response)["type"] == "not_found_error"
    assert stored_decision(use_redis, trace) is None
    assert Trace.objects.get(pk=trace.pk).cancel_requested_at is None


def test_a_member_sees_a_shared_turn_but_may_not_decide_or_stop_it(conversation, alice, bob, team_a, waiting,
                                                                   use_redis):
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    trace = waiting(conversation, alice)
    client = key_client(bob, team_a, ["chat"])

    assert len(approvals(client, trace).json()["data"]) == 1
    for response in (decide(client, trace, approved=True), stop(client, trace)):
        assert response.status_code == 403
        assert "Only the conversation's owner or a team admin" in error_of(response)["message"]
    assert stored_decision(use_redis, trace) is None


def test_a_viewer_may_not_decide_or_stop(agent, bob, team_a, make_member, waiting, use_redis):
    own = conversation_create(agent=agent, membership=member_of(bob, team_a))
    trace = waiting(own, bob)
    client = key_client(bob, team_a, ["chat"])
    make_member(team_a, "bob", Membership.Role.VIEWER)  # demoted after the key was made

    for response in (decide(client, trace, approved=True), stop(client, trace)):
        assert response.status_code == 403 and error_of(response)["type"] == "permission_error"
    assert stored_decision(use_redis, trace) is None


def test_deciding_and_stopping_need_the_chat_scope(conversation, alice, team_a, waiting):
    trace = waiting(conversation, alice)
    client = key_client(alice, team_a, ["traces:read"])

    for response in (decide(client, trace, approved=True), stop(client, trace)):
        assert response.status_code == 403 and error_of(response)["code"] == "insufficient_scope"


def test_an_admin_decides_on_a_teammates_turn_as_a_team_admin(agent, alice, bob, team_a, waiting, use_redis):
    theirs = conversation_create(agent=agent, membership=member_of(bob, team_a))
    trace = waiting(theirs, bob)

    assert decide(key_client(alice, team_a, ["chat"]), trace, approved=True).status_code == 200
    assert stored_decision(use_redis, trace)["role"] == "a team owner"


# -- stopping -------------------------------------------------------------------------------------
def test_stopping_a_running_turn_tells_its_worker(conversation, alice, team_a, waiting, use_redis):
    trace = waiting(conversation, alice)

    response = stop(key_client(alice, team_a, ["chat"]), trace)

    assert response.status_code == 200, response.content
    assert response.json() == {"trace": trace.uuid.hex, "status": "running", "stopping": True,
                               "events_url": f"http://testserver/api/v1/traces/{trace.uuid.hex}/events",
                               "trace_url": f"http://testserver/api/v1/traces/{trace.uuid.hex}"}
    trace.refresh_from_db()
    assert trace.cancel_requested_at is not None and trace.cancel_reason == "Cancelled by alice"
    assert redis.Redis.from_url(use_redis).get(f"agentsite:cancel:{trace.uuid.hex}") == b"Cancelled by alice"


def test_stopping_a_queued_turn_cancels_it_and_an_ended_one_stays(conversation, alice, team_a, sent_turns,
                                                                  sample_trace):
    client = key_client(alice, team_a, ["chat"])
    queued = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")

    assert stop(client, queued).json() | {"events_url": "", "trace_url": ""} == {
        "trace": queued.uuid.hex, "status": "cancelled", "stopping": False, "events_url": "", "trace_url": ""}
    ended = stop(client, sample_trace).json()
    assert (ended["status"], ended["stopping"]) == ("completed", False)


# -- real turns -----------------------------------------------------------------------------------
@pytest.fixture
def careful(make_agent, alice):
    """alice's conversation with an agent whose calculator asks for approval."""
    agent = make_agent(name="Careful", approval=("calculator",))
    return conversation_create(agent=agent, membership=member_of(alice, agent.team))


def send(client, conversation, text):
    response = client.post(f"/api/v1/conversations/{conversation.uuid}/messages", {"text": text},
                           content_type="application/json")
    assert response.status_code == 202, response.content
    return Trace.objects.get(uuid=response.json()["trace"]["id"])


def ended(trace) -> Trace:
    return wait_for(lambda: (t := Trace.objects.get(pk=trace.pk)).status not in Trace.ACTIVE and t,
                    timeout=30, what="the turn to end")


def test_a_turn_waits_for_the_api_approval_then_answers(careful, alice, team_a, turns_run):
    client = key_client(alice, team_a, ["chat"])
    trace = send(client, careful, "What is 6 * 7?")
    step = waiting_approval(trace)

    [approval] = approvals(client, trace).json()["data"]
    assert (approval["call_id"], approval["tool"]) == (step.call_id, "calculator")
    assert approval["arguments"] == {"expression": "6*7"}
    response = client.post(approval["decide_url"], {"approved": True}, content_type="application/json")
    assert response.status_code == 200, response.content

    trace = ended(trace)
    assert trace.status == "completed" and "42" in trace.answer
    assert approvals(client, trace).json()["data"] == []
    assert decide(client, trace, step.call_id, approved=True).status_code == 409
    tool = Step.objects.get(trace=trace, kind="tool_call")
    assert tool.success and Step.objects.get(trace=trace, kind="approval").meta["decided_by"] == "alice"


def test_a_denial_with_a_reason_is_what_the_model_reads(careful, alice, team_a, turns_run):
    client = key_client(alice, team_a, ["chat"])
    trace = send(client, careful, "What is 6 * 7?")
    step = waiting_approval(trace)

    assert decide(client, trace, step.call_id, approved=False, reason="Use mental arithmetic.").status_code == 200

    trace = ended(trace)
    approval = Step.objects.get(trace=trace, kind="approval")
    assert approval.error == "Declined by the conversation's owner: Use mental arithmetic."
    result = Message.objects.get(trace=trace, role="tool").blocks[0]
    assert result["output"].startswith("Declined by the conversation's owner: Use mental arithmetic.")
    assert not Step.objects.get(trace=trace, kind="tool_call").success


def test_a_turn_waiting_for_approval_is_stopped_through_the_api(careful, alice, team_a, turns_run):
    client = key_client(alice, team_a, ["chat"])
    trace = send(client, careful, "What is 6 * 7?")
    waiting_approval(trace)

    assert stop(client, trace).json()["stopping"] is True

    trace = ended(trace)
    assert trace.status == "cancelled"
    assert Step.objects.get(trace=trace, kind="approval").status != "waiting"


async def _frames(response, until) -> str:
    """What the streamed response sends until ``until(text so far)`` holds (20 s at most)."""
    text = ""
    frames = response.streaming_content
    async with asyncio.timeout(20):
        while not until(text):
            text += (await anext(frames)).decode()
    return text


def _data(text: str) -> list:
    return [json.loads(block[len("data: "):]) for block in text.split("\n\n")
            if block.startswith("data: ") and block != "data: [DONE]"]


async def test_a_streamed_completion_tells_the_waiting_call_and_finishes_once_it_is_approved(
        careful, alice, team_a, turns_run, close_thread_connections, monkeypatch):
    monkeypatch.setattr(turn_stream, "KEEPALIVE_S", 0.2)
    _, secret = await sync_to_async(api_key_create)(membership=await sync_to_async(member_of)(alice, team_a),
                                                    name="stream", scopes=["chat"])
    auth = {"Authorization": f"Bearer {secret}"}
    response = await AsyncClient().post("/v1/chat/completions", json.dumps({
        "model": careful.agent.slug, "stream": True,
        "messages": [{"role": "user", "content": "What is 6 * 7?"}]}),
        content_type="application/json", headers=auth)
    assert response.status_code == 200

    head = await _frames(response, lambda text: '"approval"' in text)
    [told] = [c for c in _data(head) if "agentsite" in c]
    assert told["object"] == "chat.completion.chunk"
    assert told["choices"] == [{"index": 0, "delta": {}, "finish_reason": None, "logprobs": None}]
    approval = told["agentsite"]["approval"]
    trace_id = told["agentsite"]["trace_id"]
    assert approval == {**approval, "tool": "calculator", "arguments": {"expression": "6*7"},
                        "decide_url": f"http://testserver/api/v1/traces/{trace_id}/approvals/{approval['call_id']}"}

    decided = await AsyncClient().post(approval["decide_url"], {"approved": True},
                                       content_type="application/json", headers=auth)
    assert decided.status_code == 200, decided.content
    rest = await _frames(response, lambda text: "data: [DONE]" in text)

    chunks = _data(head + rest)
    assert sum(1 for c in chunks if "agentsite" in c) == 1  # told once
    answer = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert "42" in answer and chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_the_rest_event_stream_tells_a_call_that_waits_already(careful, alice, team_a, turns_run,
                                                                     close_thread_connections):
    client = await sync_to_async(key_client)(alice, team_a, ["chat"])
    trace = await sync_to_async(send)(client, careful, "What is 6 * 7?")
    step = await sync_to_async(waiting_approval)(trace)
    response = await AsyncClient().get(f"/api/v1/traces/{trace.uuid.hex}/events",
                                       headers={"Authorization": client.defaults["HTTP_AUTHORIZATION"]})

    head = await _frames(response, lambda text: "event: approval" in text)
    block = next(b for b in head.split("\n\n") if b.startswith("event: approval"))
    data = json.loads(block.split("data: ", 1)[1])
    assert (data["call_id"], data["tool"], data["arguments"]) == (step.call_id, "calculator", {"expression": "6*7"})
    assert data["decide_url"].startswith("http://testserver/api/v1/traces/")

    await sync_to_async(decide)(client, trace, step.call_id, approved=True)
    rest = await _frames(response, lambda text: "event: end" in text)
    assert "event: approval" not in rest and '"status":"completed"' in rest


# -- a turn's tool calls, read back ---------------------------------------------------------------
def messages(client, conversation):
    response = client.get(f"/api/v1/conversations/{conversation.uuid}/messages")
    assert response.status_code == 200, response.content
    return response.json()["data"]


def test_messages_carry_their_tool_calls_with_status_and_their_results(careful, alice, team_a, turns_run):
    client = key_client(alice, team_a, ["chat"])
    trace = send(client, careful, "What is 6 * 7?")
    step = waiting_approval(trace)
    assert decide(client, trace, step.call_id, approved=True).status_code == 200
    ended(trace)

    user, called, result, answer = messages(client, careful)

    assert (user["role"], user["tool_calls"], user["tool_results"]) == ("user", [], [])
    assert (called["role"], called["tool_results"]) == ("assistant", [])
    [call] = called["tool_calls"]
    assert call == {**call, "call_id": step.call_id, "name": "calculator", "arguments": {"expression": "6*7"},
                    "status": "ok", "result": "42", "result_chars": 2, "error": "", "needs_approval": True,
                    "decided_by": "alice"}
    assert call["duration_ms"] is not None
    assert (result["role"], result["tool_calls"]) == ("tool", [])
    assert result["tool_results"] == [{"call_id": step.call_id, "name": "calculator", "output": "42",
                                       "is_error": False}]
    assert answer["role"] == "assistant" and "42" in answer["text"] and answer["tool_calls"] == []


def test_a_denied_call_reads_as_denied(careful, alice, team_a, turns_run):
    client = key_client(alice, team_a, ["chat"])
    trace = send(client, careful, "What is 6 * 7?")
    step = waiting_approval(trace)
    decide(client, trace, step.call_id, approved=False, reason="No.")
    ended(trace)

    _, called, result, _ = messages(client, careful)

    [call] = called["tool_calls"]
    assert (call["status"], call["error"]) == ("denied", "Declined by the conversation's owner: No.")
    assert result["tool_results"][0]["output"].startswith("Declined by the conversation's owner: No.")


def test_reading_many_turns_tool_calls_takes_a_bounded_number_of_queries(conversation, alice, team_a,
                                                                         sent_turns, django_assert_max_num_queries):
    from agents.turns.tasks import turn_run

    for n in range(4):
        trace = turn_start(conversation=conversation, membership=member_of(alice, conversation),
                           text=f"What is {n} * 7?")
        assert turn_run(trace.pk) == "completed"
    client = key_client(alice, team_a, ["chat"])
    client.get("/api/v1/agents")  # the key's first use writes its last-used time

    with django_assert_max_num_queries(6):
        data = messages(client, conversation)

    calls = [c for m in data for c in m["tool_calls"]]
    assert len(calls) == 4 and {c["status"] for c in calls} == {"ok"}
    assert [c["result"] for c in calls] == ["0", "7", "14", "21"]


async def test_the_event_stream_tells_a_call_when_its_step_is_announced_and_once(conversation, alice, team_a,
                                                                                 sent_turns, monkeypatch,
                                                                                 close_thread_connections):
    from channels.layers import get_channel_layer

    from tests.agents.api.rest_keys import async_key_client
    from traces.record import live

    trace = await sync_to_async(turn_start)(conversation=conversation, membership=await sync_to_async(member_of)(
        alice, conversation), text="What is 2 + 3?")
    await sync_to_async(trace_claim)(trace_id=trace.pk, worker="w1")
    client = await sync_to_async(async_key_client)(alice, team_a, ["chat"])
    monkeypatch.setattr(turn_stream, "KEEPALIVE_S", 0.05)
    response = await client.get(f"/api/v1/traces/{trace.uuid.hex}/events")
    frames = response.streaming_content.__aiter__()
    first = await asyncio.wait_for(anext(frames), 5)  # a comment while nothing happens: it listens
    group = live.trace_group(trace.uuid)
    assert first.startswith(b":") and get_channel_layer().groups.get(group)

    step = await Step.objects.acreate(trace=trace, seq=1, kind="approval", status="waiting", name="calculator",
                                      call_id="call_9", started_at=timezone.now(), meta={"timeout_s": 60})
    await StepPayload.objects.acreate(step=step, kind="arguments", content='{"expression": "1+1"}')
    announced = {"event": "step", "trace": trace.uuid.hex, "seq": 3, "step": 1, "status": "waiting",
                 "kind": "approval"}
    for _ in range(2):  # a frame delivered twice tells the call once
        await live.publish([group], announced)
    await Trace.objects.filter(pk=trace.pk).aupdate(status="cancelled")
    await live.publish([group], {"event": "trace", "trace": trace.uuid.hex, "seq": 4, "status": "cancelled"})
    text = ""
    async with asyncio.timeout(10):
        async for frame in frames:
            text += frame.decode()

    names = [b.split("\n", 1)[0].removeprefix("event: ") for b in text.split("\n\n") if b.startswith("event: ")]
    assert names == ["step", "approval", "step", "trace", "end"]
    data = json.loads(next(b for b in text.split("\n\n") if b.startswith("event: approval")).split("data: ", 1)[1])
    assert data == {**data, "call_id": "call_9", "tool": "calculator", "arguments": {"expression": "1+1"},
                    "timeout_s": 60,
                    "decide_url": f"http://testserver/api/v1/traces/{trace.uuid.hex}/approvals/call_9"}
