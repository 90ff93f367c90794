"""Every model parameter of ``POST /v1/chat/completions`` is honoured or refused with a 400
naming it: ``max_tokens`` and ``stop`` bind the offline demo model's answer, the sampling
parameters and ``response_format`` reach an OpenAI-compatible server (``RecordingModelServer``,
the LLM edge's fake: a real HTTP server on a loopback port that keeps the bodies it was sent),
and what an agent's provider cannot take is refused before any turn starts."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient, Client

from agents.models import Provider
from agents.runtime.messages import Message
from agents.runtime.providers.anthropic import AnthropicProvider
from agents.runtime.providers.base import ChatRequest
from agentsite.api_keys import api_key_create
from tests.members import member_of
from traces.models import StepPayload, Trace

pytestmark = pytest.mark.django_db(transaction=True)
STORY = [{"role": "user", "content": "Tell me a story"}]


def key_for(user, team) -> str:
    return api_key_create(membership=member_of(user, team), name="test", scopes=["chat"])[1]


def post(secret: str, body: dict):
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}").post(
        "/v1/chat/completions", json.dumps(body), content_type="application/json")


def refusal(response) -> dict:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


# -- honoured by the demo model --------------------------------------------------------------------
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_cuts_the_answer_and_says_length(agent, alice, team_a, turns_run, field):
    secret = key_for(alice, team_a)
    whole = post(secret, {"model": agent.slug, "messages": STORY}).json()
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert whole["usage"]["completion_tokens"] > 100

    response = post(secret, {"model": agent.slug, "messages": STORY, field: 5})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert 0 < body["usage"]["completion_tokens"] <= 5
    answer = body["choices"][0]["message"]["content"]
    assert answer and whole["choices"][0]["message"]["content"].startswith(answer.strip())
    # The trace keeps the request as the model was sent it, with the caller's cap.
    sent = StepPayload.objects.get(step__trace__uuid=body["agentsite"]["trace_id"],
                                   step__kind="llm_request", kind="request")
    assert json.loads(sent.content)["max_tokens"] == 5


async def test_max_tokens_streamed_ends_with_length(agent, alice, team_a, turns_run,
                                                    close_thread_connections):
    secret = await sync_to_async(key_for)(alice, team_a)
    response = await AsyncClient().post("/v1/chat/completions", json.dumps({
        "model": agent.slug, "messages": STORY, "max_tokens": 5, "stream": True,
        "stream_options": {"include_usage": True}}), content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 200
    raw = b"".join([part async for part in response.streaming_content]).decode()
    chunks = [json.loads(line[6:]) for line in raw.split("\n\n") if line.startswith("data: {")]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "length"
    assert 0 < chunks[-1]["usage"]["completion_tokens"] <= 5


def test_stop_ends_the_answer_before_the_sequence(agent, alice, team_a, turns_run):
    secret = key_for(alice, team_a)
    whole = post(secret, {"model": agent.slug, "messages": STORY}).json()["choices"][0]
    assert " the " in whole["message"]["content"]

    body = post(secret, {"model": agent.slug, "messages": STORY, "stop": ["the "]}).json()

    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert "the " not in choice["message"]["content"]
    assert whole["message"]["content"].startswith(choice["message"]["content"].strip())


def test_default_values_of_fields_agentsite_does_not_use_are_accepted(agent, alice, team_a, turns_run):
    response = post(key_for(alice, team_a), {
        "model": agent.slug, "messages": [{"role": "user", "content": "What is 6 * 7?"}],
        "logprobs": False, "tool_choice": "auto", "parallel_tool_calls": True, "store": True,
        "response_format": {"type": "text"}, "temperature": 0.2, "seed": 7,
        "modalities": ["text"], "service_tier": "auto", "metadata": {}})
    assert response.status_code == 200, response.content
    assert "42" in response.json()["choices"][0]["message"]["content"]


# -- refused -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("extra", "param"), [
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logit_bias": {"50256": -100}}, "logit_bias"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "x"}}}, "tool_choice"),
    ({"functions": [{"name": "x"}]}, "functions"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"reasoning_effort": "high"}, "reasoning_effort"),
    ({"metadata": {"a": "b"}}, "metadata"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
     "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"temperature": 3}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"presence_penalty": -3}, "presence_penalty"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 5, "max_completion_tokens": 6}, "max_completion_tokens"),
])
def test_a_field_that_cannot_be_honoured_is_a_400_naming_it(agent, alice, team_a, extra, param):
    response = post(key_for(alice, team_a), {"model": agent.slug, "messages": STORY, **extra})
    assert refusal(response)["param"] == param
    assert not Trace.objects.exists()


def test_the_demo_model_answers_in_the_json_asked_for(agent, alice, team_a, turns_run):
    schema = {"name": "reply", "strict": True, "schema": {
        "type": "object", "required": ["text", "sure"], "additionalProperties": False,
        "properties": {"text": {"type": "string"}, "sure": {"type": "boolean"}}}}
    secret = key_for(alice, team_a)
    body = post(secret, {"model": agent.slug, "messages": STORY,
                         "response_format": {"type": "json_schema", "json_schema": schema}}).json()
    assert "choices" in body, body
    value = json.loads(body["choices"][0]["message"]["content"])
    assert set(value) == {"text", "sure"} and value["sure"] is True
    loose = post(secret, {"model": agent.slug, "messages": STORY,
                          "response_format": {"type": "json_object"}}).json()
    assert "answer" in json.loads(loose["choices"][0]["message"]["content"])


@pytest.mark.parametrize("field", ["seed", "presence_penalty", "frequency_penalty"])
def test_an_anthropic_agent_refuses_what_the_messages_api_cannot_take(make_agent, alice, team_a,
                                                                      field):
    agent = make_agent(name="Claude")
    Provider.objects.filter(pk=agent.provider_id).update(kind="anthropic")
    response = post(key_for(alice, team_a), {"model": agent.slug, "messages": STORY, field: 1})
    error = refusal(response)
    assert error["param"] == field and error["code"] == "unsupported_parameter"


def test_anthropic_takes_temperature_top_p_and_stop_as_stop_sequences():
    body = AnthropicProvider(api_key="k").payload(ChatRequest(
        model="claude", messages=[Message.user("hi")], temperature=0.1, top_p=0.5, stop=["END"],
        seed=3, max_tokens=9), stream=False)
    assert (body["temperature"], body["top_p"], body["stop_sequences"], body["max_tokens"]) == (
        0.1, 0.5, ["END"], 9)
    assert "seed" not in body and "stop" not in body


# -- honoured by an OpenAI-compatible server -----------------------------------------------------------
class RecordingModelServer(ThreadingHTTPServer):
    """An OpenAI-compatible chat completions endpoint on a loopback port that answers "Hi." and
    keeps the body of every request it was sent (the LLM edge's fake)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), RecordingHandler)
        # As llama-cpp-python's server: a json_schema response_format is a 500.
        self.refuse_json_schema = False
        self.bodies: list[dict] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class RecordingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecordingModelServer

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        self.server.bodies.append(body)
        if self.server.refuse_json_schema and (body.get("response_format") or {}).get("type") == "json_schema":
            payload = json.dumps({"error": {"message": "1 validation error: ('body', 'response_format', "
                                                       "'type') Input should be 'text' or 'json_object', "
                                                       "input: 'json_schema'", "type": "internal_server_error"}}).encode()
            self.send_response(500)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        finish = "length" if body.get("max_tokens") == 1 else "stop"
        text = '{"a": "Hi."}' if body.get("response_format") else "Hi."
        usage = {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}
        if body.get("stream"):
            chunks = [{"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                      {"choices": [], "usage": usage}]
            data = "".join(f"data: {json.dumps({'id': 'c', 'model': 'm', **c})}\n\n" for c in chunks)
            payload, kind = (data + "data: [DONE]\n\n").encode(), "text/event-stream"
        else:
            payload = json.dumps({"id": "c", "model": "m", "usage": usage, "choices": [{
                "index": 0, "message": {"role": "assistant", "content": text},
                "finish_reason": finish}]}).encode()
            kind = "application/json"
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def model_server(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # the operator allows this model server
    server = RecordingModelServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_sampling_parameters_and_json_formats_reach_an_openai_compatible_model(
        make_agent, alice, team_a, turns_run, model_server):
    agent = make_agent(name="Local", tools=(), temperature=0.7)
    Provider.objects.filter(pk=agent.provider_id).update(kind="openai", base_url=model_server.url)
    schema = {"name": "answer", "strict": True,
              "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    response = post(key_for(alice, team_a), {
        "model": agent.slug, "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 50, "temperature": 0.1, "top_p": 0.9, "stop": "END", "seed": 42,
        "presence_penalty": 0.5, "frequency_penalty": -0.5,
        "response_format": {"type": "json_schema", "json_schema": schema}})

    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["message"]["content"] == '{"a": "Hi."}'
    [sent] = model_server.bodies
    assert {k: sent.get(k) for k in ("max_tokens", "temperature", "top_p", "stop", "seed",
                                     "presence_penalty", "frequency_penalty")} == {
        "max_tokens": 50, "temperature": 0.1, "top_p": 0.9, "stop": ["END"], "seed": 42,
        "presence_penalty": 0.5, "frequency_penalty": -0.5}
    assert sent["response_format"] == {"type": "json_schema", "json_schema": schema}


def test_without_parameters_the_agents_own_settings_reach_the_model(make_agent, alice, team_a,
                                                                    turns_run, model_server):
    agent = make_agent(name="Local", tools=(), temperature=0.7, max_output_tokens=300)
    Provider.objects.filter(pk=agent.provider_id).update(kind="openai", base_url=model_server.url)
    secret = key_for(alice, team_a)
    post(secret, {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}]})
    # A caller's cap can lower the agent's longest answer, never raise it.
    post(secret, {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}],
                  "max_tokens": 1000})
    first, second = model_server.bodies
    assert (first["temperature"], first["max_tokens"]) == (0.7, 300)
    assert "seed" not in first and "response_format" not in first and "stop" not in first
    assert second["max_tokens"] == 300


def test_a_length_answer_from_the_model_is_finish_reason_length(make_agent, alice, team_a,
                                                                  turns_run, model_server):
    agent = make_agent(name="Local", tools=())
    Provider.objects.filter(pk=agent.provider_id).update(kind="openai", base_url=model_server.url)
    body = post(key_for(alice, team_a), {"model": agent.slug, "max_tokens": 1,
                                         "messages": [{"role": "user", "content": "hi"}]}).json()
    assert body["choices"][0]["finish_reason"] == "length"


def test_a_server_that_takes_only_the_older_json_form_is_sent_it(make_agent, alice, team_a, turns_run,
                                                                  model_server):
    model_server.refuse_json_schema = True
    agent = make_agent(name="Llama", tools=())
    Provider.objects.filter(pk=agent.provider_id).update(kind="openai", base_url=model_server.url)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    for _ in range(2):
        response = post(key_for(alice, team_a), {
            "model": agent.slug, "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        assert response.status_code == 200, response.content
        assert json.loads(response.json()["choices"][0]["message"]["content"]) == {"a": "Hi."}

    # Refused once, then that server is sent {"type": "json_object", "schema": ...}, also later.
    formats = [b["response_format"] for b in model_server.bodies]
    assert formats == [{"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
                       {"type": "json_object", "schema": schema}, {"type": "json_object", "schema": schema}]


def test_an_agent_can_forbid_callers_model_parameters_but_not_a_format(make_agent, alice, team_a, turns_run):
    agent = make_agent(name="Strict", allow_request_params=False)
    secret = key_for(alice, team_a)
    for field, value in (("temperature", 0.1), ("max_tokens", 5), ("seed", 1)):
        error = refusal(post(secret, {"model": agent.slug, "messages": STORY, field: value}))
        assert (error["param"], error["code"]) == (field, "parameter_not_allowed")
    error = refusal(Client(HTTP_AUTHORIZATION=f"Bearer {secret}").post(
        "/v1/responses", json.dumps({"model": agent.slug, "input": "hi", "max_output_tokens": 5}),
        content_type="application/json"))
    assert error["param"] == "max_output_tokens"
    assert not Trace.objects.exists()
    answer = post(secret, {"model": agent.slug, "messages": STORY, "response_format": {"type": "json_object"}})
    assert answer.status_code == 200, answer.content
