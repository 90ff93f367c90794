"""The API's model parameters on a real model: an agent on a llama.cpp server (``make
test-llm``; skipped without a server, saying why), called with the official ``openai`` client
through chat completions and the Responses API. ``max_tokens`` / ``max_output_tokens`` cut the
model's own answer (``finish_reason`` ``length``, a response ``incomplete``), and a JSON schema
is sent to the server natively and its answer checked by the product: what comes back parses
and matches the schema."""

from __future__ import annotations

import json

import openai
import pytest
from jsonschema import Draft202012Validator

from tests.llm.live import LIVE, MODEL, URL

pytestmark = [*LIVE, pytest.mark.timeout(180)]
AGENT = "Local plain"
SCHEMA = {"type": "object", "required": ["city", "country"], "additionalProperties": False,
          "properties": {"city": {"type": "string"}, "country": {"type": "string"}}}
ASK = "Name one large city and its country."


@pytest.fixture(scope="module")
def api(stack):
    spec = {"agents": [{"name": AGENT, "model": MODEL, "tools": [],
                        "provider": {"kind": "openai", "base_url": URL},
                        "fields": {"temperature": 0, "max_output_tokens": 128,
                                   "system_prompt": "You answer briefly."}}]}
    stack.ids["agents"].update(stack.seed(spec)["agents"])
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.ids["keys"]["alice-chat"],
                         max_retries=0, timeout=120)


def slug(api) -> str:
    return next(m.id for m in api.models.list() if m.name == AGENT)


def test_max_tokens_cuts_the_real_models_answer(api):
    whole = api.chat.completions.create(model=slug(api), messages=[
        {"role": "user", "content": "Write a long story about a dragon."}])
    cut = api.chat.completions.create(model=slug(api), max_tokens=5, messages=[
        {"role": "user", "content": "Write a long story about a dragon."}])

    assert whole.usage.completion_tokens > 5
    assert cut.choices[0].finish_reason == "length" and 0 < cut.usage.completion_tokens <= 5
    response = api.responses.create(model=slug(api), input="Write a long story about a dragon.",
                                     max_output_tokens=5)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert 0 < response.usage.output_tokens <= 5


def test_a_json_schema_answer_parses_and_matches(api):
    completion = api.chat.completions.create(
        model=slug(api), messages=[{"role": "user", "content": ASK}],
        response_format={"type": "json_schema", "json_schema": {"name": "place", "strict": True,
                                                                "schema": SCHEMA}})
    value = json.loads(completion.choices[0].message.content)
    assert not list(Draft202012Validator(SCHEMA).iter_errors(value)), value

    response = api.responses.create(model=slug(api), input=ASK, text={"format": {
        "type": "json_schema", "name": "place", "strict": True, "schema": SCHEMA}})
    value = json.loads(response.output_text)
    assert not list(Draft202012Validator(SCHEMA).iter_errors(value)), value
