"""The Responses API against a live stack (daphne, a Celery worker, the embedded Redis, the demo
model), driven by the official ``openai`` client and by openai-agents with its default settings
(the Responses API; only its tracing export to OpenAI is switched off, as there is no network;
from a virtualenv of its own, ``tests/e2e/clients/``):
a response whole and streamed, the agent's calls as the SDK's own ``McpCall`` items,
``previous_response_id``, retrieve and delete, a call waiting for approval decided through the
REST API while the stream waits, and a multi-turn run of an openai-agents ``Agent``. The keys
are made by the stack's seed (``API_KEYS`` in conftest)."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai.types.responses import ResponseCompletedEvent, ResponseTextDeltaEvent
from openai.types.responses.response_output_item import McpCall

from tests.e2e.clients import openai_agents

pytestmark = pytest.mark.timeout(120)
QUESTION = "What is 6 * 7?"  # the demo model asks the calculator for 6*7 ("careful" has it)
TIME = "What time is it?"  # ... and the clock for this ("helper" has it)


def client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.ids["keys"]["alice-chat"],
                         max_retries=0, timeout=60)


def rest(stack, method: str, path: str, **kwargs) -> httpx.Response:
    key = stack.ids["keys"]["alice-chat"]
    url = path if path.startswith("http") else f"{stack.url}{path}"
    return httpx.request(method, url, headers={"Authorization": f"Bearer {key}"}, timeout=30, **kwargs)


def test_a_response_with_the_agents_call_then_read_back_and_deleted(stack):
    api = client(stack)
    response = api.responses.create(model="helper", input=TIME, instructions="Be brief.")

    assert response.status == "completed" and response.output_text
    [call] = [item for item in response.output if isinstance(item, McpCall)]
    assert (call.name, call.status, call.server_label) == ("current_time", "completed", "agentsite")
    assert call.output and call.error is None
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.usage.input_tokens_details.cached_tokens == 0

    again = api.responses.retrieve(response.id)
    assert again.output_text == response.output_text and again.instructions == "Be brief."
    [given] = api.responses.input_items.list(response.id).data
    assert given.role == "user" and TIME in given.content[0].text
    assert api.responses.delete(response.id) is None
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(response.id)


def test_a_streamed_response_and_its_continuation(stack):
    api = client(stack)
    events = list(api.responses.create(model="helper", input="Tell me about the weather.", stream=True))

    assert events[0].type == "response.created" and isinstance(events[-1], ResponseCompletedEvent)
    text = "".join(e.delta for e in events if isinstance(e, ResponseTextDeltaEvent))
    final = events[-1].response
    assert len(text) > 20 and text == final.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))

    follow = api.responses.create(model="helper", input=TIME, previous_response_id=final.id)
    assert follow.previous_response_id == final.id and follow.output_text
    conversation = final.model_extra["agentsite"]["conversation_id"]
    assert follow.model_extra["agentsite"]["conversation_id"] == conversation
    messages = rest(stack, "GET", f"/api/v1/conversations/{conversation}/messages").json()["data"]
    assert [m["text"] for m in messages if m["role"] == "user"] == ["Tell me about the weather.", TIME]


def test_a_refused_field_is_the_sdks_bad_request(stack):
    with pytest.raises(openai.BadRequestError) as refused:
        client(stack).responses.create(model="helper", input="hi", reasoning={"effort": "high"})
    assert refused.value.body["param"] == "reasoning"


def test_a_streamed_response_waits_for_an_approval_given_through_the_api(stack):
    told = []
    with client(stack).responses.stream(model="careful", input=QUESTION) as stream:
        for event in stream:
            extra = (event.model_extra or {}).get("agentsite") if event.type == "response.output_item.added" else None
            if extra:
                told.append(extra)
                approval = extra["approval"]
                assert event.item.approval_request_id == approval["call_id"]
                assert (approval["tool"], approval["arguments"]) == ("calculator", {"expression": "6*7"})
                decided = rest(stack, "POST", approval["decide_url"], json={"approved": True})
                assert decided.status_code == 200, decided.text
        final = stream.get_final_response()

    assert len(told) == 1 and final.status == "completed" and "42" in final.output_text
    [call] = [item for item in final.output if isinstance(item, McpCall)]
    assert call.approval_request_id == told[0]["approval"]["call_id"]


def test_openai_agents_runs_an_agent_on_the_responses_api(stack):
    """openai-agents 0.24 with its default settings: a run, a second turn with the history sent
    back, a third continuing the stored response, and a streamed run."""
    got = openai_agents.run("agents_run.py", {
        "AGENTSITE_URL": stack.url, "AGENTSITE_KEY": stack.ids["keys"]["alice-chat"],
        "AGENTSITE_MODEL": "helper", "AGENTSITE_INPUT": TIME})

    first, second, third = got["runs"]
    assert first["output"] and first["calls"] == ["current_time"]
    assert second["output"] and second["output"] != first["output"] and second["calls"] == []
    assert third["output"] and third["calls"] == ["current_time"]
    streamed = got["streamed"]
    assert streamed["output"] and streamed["deltas"] == streamed["output"]
    conversations = [rest(stack, "GET", f"/v1/responses/{run['response_id']}").json()["agentsite"]["conversation_id"]
                     for run in (second, third)]
    assert conversations[0] == conversations[1]
