"""``/v1/responses`` in this process: a response whole and streamed with its typed events, the
agent's server-side calls as ``mcp_call`` items, ``previous_response_id`` continuing (and
branching) the stored conversation, ``store: false``, retrieve, delete and cancel, end users
kept apart, an approval announced in the stream, and every field honoured or refused with a 400
naming it. Real turns run in a thread of this process, as a worker thread runs them (the
official ``openai`` client and openai-agents against a live stack: tests/e2e/test_responses.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient, Client

from agents.chat.services import conversation_create
from agents.models import Conversation, Message
from agents.turns.services import turn_start
from agentsite.api_keys import api_key_create
from tests.approvals import waiting_approval
from tests.helpers import wait_for
from tests.members import member_of
from traces.models import Trace

pytestmark = pytest.mark.django_db(transaction=True)


def key_for(user, team) -> str:
    return api_key_create(membership=member_of(user, team), name="test", scopes=["chat"])[1]


def client(secret: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def create(secret: str, body: dict, expect: int = 200) -> dict:
    response = client(secret).post("/v1/responses", json.dumps(body), content_type="application/json")
    assert response.status_code == expect, response.content
    return response.json()


def refusal(secret: str, body: dict) -> dict:
    error = create(secret, body, expect=400)["error"]
    assert error["type"] == "invalid_request_error"
    return error


def texts(body: dict) -> list[str]:
    return [part["text"] for item in body["output"] if item["type"] == "message"
            for part in item["content"]]


def test_a_response_answers_with_its_output_usage_and_trace(agent, alice, team_a, turns_run):
    secret = key_for(alice, team_a)
    body = create(secret, {"model": agent.slug, "instructions": "Answer briefly.",
                           "input": "What is 6 * 7?", "metadata": {"case": "a"}})

    trace = Trace.objects.get()
    assert body["id"] == f"resp_{trace.uuid.hex}" and body["object"] == "response"
    assert body["status"] == "completed" and body["error"] is None
    assert texts(body)[-1] == trace.answer and "42" in trace.answer
    assert body["usage"]["input_tokens"] == trace.prompt_tokens > 0
    assert body["usage"]["output_tokens"] == trace.output_tokens > 0
    assert body["usage"]["input_tokens_details"]["cached_tokens"] == trace.cache_read_tokens
    assert (body["instructions"], body["metadata"], body["store"]) == ("Answer briefly.", {"case": "a"}, True)
    assert body["agentsite"]["trace_id"] == trace.uuid.hex
    # The agent's calculator ran on the server: an mcp_call item before the answer.
    [call] = [item for item in body["output"] if item["type"] == "mcp_call"]
    assert (call["name"], call["server_label"], call["status"]) == ("calculator", "agentsite", "completed")
    assert json.loads(call["arguments"]) == {"expression": "6*7"} and "42" in call["output"]
    assert body["output"].index(call) < len(body["output"]) - 1
    first = Message.objects.filter(trace=trace, role="user").get()
    assert first.text == "Instructions from the caller:\nAnswer briefly.\n\nWhat is 6 * 7?"
    assert trace.conversation.ephemeral

    # Read back the same.
    again = client(secret).get(f"/v1/responses/{body['id']}").json()
    assert again["output"] == body["output"] and again["status"] == "completed"
    assert (again["instructions"], again["metadata"]) == ("Answer briefly.", {"case": "a"})


def test_input_items_are_the_history_and_agent_items_sent_back_are_accepted(agent, alice, team_a, turns_run):
    secret = key_for(alice, team_a)
    body = create(secret, {"model": agent.slug, "input": [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "My name is Ada."}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Hello Ada.", "annotations": []}]},
        {"type": "mcp_call", "id": "mcp_x", "server_label": "agentsite", "name": "calculator",
         "arguments": "{}", "output": "1"},
        {"role": "user", "content": "Hello again"}]})

    assert body["status"] == "completed"
    rows = list(Message.objects.filter(conversation__traces__uuid=body["agentsite"]["trace_id"])
                .order_by("id").values_list("role", "text")[:3])
    assert rows == [("user", "Instructions from the caller:\nBe brief.\n\nMy name is Ada."),
                    ("assistant", "Hello Ada."), ("user", "Hello again")]


def test_previous_response_id_continues_the_conversation_and_can_branch(agent, alice, team_a, turns_run):
    secret = key_for(alice, team_a)
    first = create(secret, {"model": agent.slug, "input": "first question"})
    second = create(secret, {"model": agent.slug, "input": "second question",
                             "previous_response_id": first["id"]})
    branch = create(secret, {"model": agent.slug, "input": "another second question",
                             "previous_response_id": first["id"]})

    assert second["previous_response_id"] == first["id"]
    traces = {t.uuid.hex: t for t in Trace.objects.all()}
    one, two, three = (traces[b["agentsite"]["trace_id"]] for b in (first, second, branch))
    assert one.conversation_id == two.conversation_id == three.conversation_id
    assert Conversation.objects.count() == 1
    parents = dict(Message.objects.filter(role="user").values_list("text", "parent_turn_id"))
    assert parents == {"first question": None, "second question": one.pk,
                       "another second question": one.pk}


def test_store_false_and_a_deleted_response_cannot_be_read_or_continued(agent, alice, team_a, turns_run):
    secret = key_for(alice, team_a)
    unstored = create(secret, {"model": agent.slug, "input": "hi", "store": False})
    assert unstored["store"] is False
    assert client(secret).get(f"/v1/responses/{unstored['id']}").status_code == 404
    error = create(secret, {"model": agent.slug, "input": "again",
                            "previous_response_id": unstored["id"]}, expect=404)["error"]
    assert error["param"] == "previous_response_id"

    kept = create(secret, {"model": agent.slug, "input": "hi"})
    deleted = client(secret).delete(f"/v1/responses/{kept['id']}")
    assert deleted.json() == {"id": kept["id"], "object": "response.deleted", "deleted": True}
    assert client(secret).get(f"/v1/responses/{kept['id']}").status_code == 404
    assert client(secret).delete(f"/v1/responses/{kept['id']}").status_code == 404
    assert client(secret).get("/v1/responses/resp_nothing").json()["error"]["code"] == "response_not_found"


def test_another_teams_or_end_users_response_is_not_found(agent, alice, charlie, team_a, team_b, turns_run):
    mine = key_for(alice, team_a)
    body = create(mine, {"model": agent.slug, "input": "hi", "user": "ada"})
    assert body["user"] == "ada"

    assert client(key_for(charlie, team_b)).get(f"/v1/responses/{body['id']}").status_code == 404
    error = create(mine, {"model": agent.slug, "input": "and me?", "user": "bob",
                          "previous_response_id": body["id"]}, expect=404)["error"]
    assert error["type"] == "not_found_error"
    same = create(mine, {"model": agent.slug, "input": "me again", "safety_identifier": "ada",
                         "previous_response_id": body["id"]})
    assert same["status"] == "completed"


def test_max_output_tokens_makes_an_incomplete_response(agent, alice, team_a, turns_run):
    body = create(key_for(alice, team_a), {"model": agent.slug, "input": "Tell me a story",
                                           "max_output_tokens": 5})
    assert body["status"] == "incomplete" and body["max_output_tokens"] == 5
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert Trace.objects.get().output_tokens <= 5


def test_text_format_json_schema_gives_json_that_matches_it(agent, alice, team_a, turns_run):
    schema = {"type": "object", "required": ["answer"], "additionalProperties": False,
              "properties": {"answer": {"type": "string"}}}
    body = create(key_for(alice, team_a), {"model": agent.slug, "input": "hi", "text": {
        "format": {"type": "json_schema", "name": "reply", "schema": schema, "strict": True}}})
    assert body["status"] == "completed" and body["text"]["format"]["name"] == "reply"
    assert set(json.loads(texts(body)[-1])) == {"answer"}


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": [{"type": "function", "name": "f", "parameters": {}}]}, "tools"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"background": True}, "background"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, "text.format"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)"}}}}}}, "text.format.schema"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}, "input[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content"),
    ({"input": [{"type": "mcp_approval_response", "approval_request_id": "c", "approve": True}]}, "input[0]"),
    ({"input": [{"role": "assistant", "content": "only me"}]}, "input"),
    ({"user": "a", "safety_identifier": "b"}, "safety_identifier"),
    ({"metadata": {str(n): "v" for n in range(17)}}, "metadata"),
    ({"previous_response_id": "not-an-id"}, "previous_response_id"),
])
def test_a_field_that_cannot_be_honoured_is_a_400_naming_it(agent, alice, team_a, body, param):
    error = refusal(key_for(alice, team_a), {"model": agent.slug, "input": "hi", **body})
    assert error["param"] == param, error
    assert Trace.objects.count() == 0


def test_fields_a_client_sends_by_default_are_accepted(agent, alice, team_a, turns_run):
    body = create(key_for(alice, team_a), {
        "model": agent.slug, "input": "hi", "tools": [], "include": [], "tool_choice": "auto",
        "parallel_tool_calls": True, "truncation": "disabled", "prompt_cache_key": "k",
        "text": {"format": {"type": "text"}}, "temperature": None})
    assert body["status"] == "completed"


async def _events(secret: str, body: dict) -> list[dict]:
    response = await AsyncClient().post("/v1/responses", json.dumps({**body, "stream": True}),
                                        content_type="application/json",
                                        headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream"
    raw = b"".join([part async for part in response.streaming_content]).decode()
    events = []
    for block in raw.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            data = json.loads(lines["data"])
            assert lines["event"] == data["type"]
            events.append(data)
    return events


async def test_a_streamed_response_sends_typed_events_in_order(agent, alice, team_a, turns_run,
                                                               close_thread_connections):
    secret = await sync_to_async(key_for)(alice, team_a)
    events = await _events(secret, {"model": agent.slug, "input": "What is 6 * 7?"})

    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    trace = await Trace.objects.aget()
    assert final["id"] == f"resp_{trace.uuid.hex}" and final["status"] == "completed"
    # Every item added is done, at the index the final response has it.
    added = {e["output_index"]: e["item"]["id"] for e in events if e["type"] == "response.output_item.added"}
    done = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    assert set(added) == set(done) == set(range(len(final["output"])))
    assert [done[i]["id"] for i in sorted(done)] == [item["id"] for item in final["output"]]
    # The deltas of the last message are its text.
    answer_id = final["output"][-1]["id"]
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta"
                       and e["item_id"] == answer_id)
    assert streamed == trace.answer and "42" in streamed
    assert "response.mcp_call.completed" in kinds


async def _frames(response, until) -> str:
    """What the streamed response sends until ``until(text so far)`` holds (20 s at most)."""
    text = ""
    async with asyncio.timeout(20):
        while not until(text):
            text += (await anext(response.streaming_content)).decode()
    return text


async def test_a_streamed_response_tells_a_call_waiting_for_approval(make_agent, alice, team_a, turns_run,
                                                                   close_thread_connections):
    careful = await sync_to_async(make_agent)(name="Careful", approval=("calculator",))
    auth = {"Authorization": f"Bearer {await sync_to_async(key_for)(alice, team_a)}"}
    response = await AsyncClient().post("/v1/responses", json.dumps({
        "model": careful.slug, "stream": True, "input": "What is 6 * 7?"}),
        content_type="application/json", headers=auth)
    head = await _frames(response, lambda text: '"agentsite": {"trace_id"' in text
                         or '"agentsite":{"trace_id"' in text)

    [asked] = [e for e in _data(head) if e["type"] == "response.output_item.added" and "agentsite" in e]
    assert asked["item"]["type"] == "mcp_call" and asked["item"]["status"] == "in_progress"
    approval = asked["agentsite"]["approval"]
    assert asked["item"]["approval_request_id"] == approval["call_id"]
    assert approval["tool"] == "calculator" and approval["arguments"] == {"expression": "6*7"}
    decided = await AsyncClient().post(approval["decide_url"], {"approved": True},
                                       content_type="application/json", headers=auth)
    assert decided.status_code == 200, decided.content
    events = _data(head + await _frames(response, lambda text: "response.completed" in text))

    assert sum(1 for e in events if "agentsite" in e) == 1  # told once
    assert events[-1]["type"] == "response.completed"
    [call] = [i for i in events[-1]["response"]["output"] if i["type"] == "mcp_call"]
    assert call["approval_request_id"] == approval["call_id"] and call["status"] == "completed"
    assert "42" in events[-1]["response"]["output"][-1]["content"][0]["text"]


def _data(text: str) -> list[dict]:
    return [json.loads(line[len("data: "):]) for block in text.split("\n\n")
            for line in block.splitlines() if line.startswith("data: ")]


def test_cancel_stops_a_waiting_turn(make_agent, alice, team_a, turns_run):
    careful = make_agent(name="Careful", approval=("calculator",))
    secret = key_for(alice, team_a)
    conversation = conversation_create(agent=careful, membership=member_of(alice, team_a))
    trace = turn_start(conversation=conversation, membership=member_of(alice, team_a), text="What is 6 * 7?")
    waiting_approval(trace)
    body = client(secret).post(f"/v1/responses/resp_{trace.uuid.hex}/cancel").json()
    assert body["id"] == f"resp_{trace.uuid.hex}"
    wait_for(lambda: Trace.objects.get(pk=trace.pk).status == "cancelled", timeout=30, what="the stop")
    assert client(secret).get(f"/v1/responses/resp_{trace.uuid.hex}").json()["status"] == "cancelled"


def test_input_items_are_what_the_response_was_given(agent, alice, team_a, turns_run):
    secret = key_for(alice, team_a)
    first = create(secret, {"model": agent.slug, "input": [
        {"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "hi"}]})
    later = create(secret, {"model": agent.slug, "input": "again", "previous_response_id": first["id"]})

    def items(response_id, **params):
        got = client(secret).get(f"/v1/responses/{response_id}/input_items", params)
        assert got.status_code == 200, got.content
        return got.json()

    page = items(first["id"], order="asc")
    assert [(i["role"], i["content"][0]["text"]) for i in page["data"]] == [
        ("user", "My name is Ada."), ("assistant", "Hello Ada."), ("user", "hi")]
    assert page["first_id"] == page["data"][0]["id"] and page["has_more"] is False
    assert [i["content"][0]["text"] for i in items(later["id"])["data"]] == ["again"]
    newest = items(first["id"], limit=1)
    assert newest["has_more"] is True and newest["data"][0]["content"][0]["text"] == "hi"
    assert items(first["id"], after=newest["last_id"], limit=1)["data"][0]["role"] == "assistant"
    assert client(secret).get(f"/v1/responses/{first['id']}/input_items", {"limit": 0}).status_code == 400
