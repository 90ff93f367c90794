"""The answer's format a request asked for (``agents.turns.answer_format``), enforced by the
turn: a valid answer ends it, an invalid one gets one more request saying what is wrong (the
model reads the problem), and a second invalid one fails the turn naming the problem. The model
is the LLM edge's fake (``FakeScriptedProvider``) or the offline demo model, which writes JSON
when asked."""

from __future__ import annotations

import json

from agents.runtime.loop import TurnStatus
from agents.runtime.messages import Message
from agents.runtime.providers.base import ChatRequest
from agents.runtime.providers.demo import DemoProvider
from agents.tools.validation import ArgumentsValidator
from agents.turns.answer_format import answer_check, answer_instructions, format_problem
from agents.turns.builder import turn_overrides_apply
from tests.agents.runtime.scripted_provider import FakeScriptedProvider, answer
from tests.agents.runtime.test_loop import config, turn

SCHEMA = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": {
    "type": "object", "required": ["name", "age"], "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}}}}


def checked(response_format):
    cfg = config()
    turn_overrides_apply(cfg, {"response_format": response_format}, native=frozenset())
    return cfg


def test_the_check_names_what_is_wrong():
    check = answer_check(SCHEMA)
    assert check('{"name": "Ada", "age": 36}') is None
    assert "not JSON" in check("Ada is 36.")
    assert "not an object" in check("[1]")
    assert "'age'" in check('{"name": "Ada", "age": "old"}')
    assert answer_check({"type": "json_object"})('{"a": 1}') is None


def test_a_schema_that_cannot_be_checked_is_refused():
    assert format_problem(SCHEMA) is None
    hostile = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}}}}
    assert "pattern" in format_problem(hostile)
    assert "object" in format_problem({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array"}}})


def test_a_provider_that_takes_the_format_is_sent_it_others_are_told_in_the_prompt():
    native = config()
    turn_overrides_apply(native, {"response_format": SCHEMA}, native=frozenset({"response_format"}))
    assert native.request_params["response_format"] == SCHEMA and not native.answer_instructions
    told = checked(SCHEMA)
    assert "response_format" not in told.request_params
    assert told.answer_instructions == answer_instructions(SCHEMA) and '"age"' in told.answer_instructions
    assert told.answer_check is not None and native.answer_check is not None


async def test_an_invalid_answer_is_asked_for_once_more_and_the_second_is_the_answer():
    provider = FakeScriptedProvider([answer("Ada is 36."), answer('{"name": "Ada", "age": 36}')])
    result, _ = await turn(provider, cfg=checked(SCHEMA))

    assert result.status is TurnStatus.COMPLETED and json.loads(result.text) == {"name": "Ada", "age": 36}
    assert [m.role.value for m in result.new_messages] == ["user", "assistant"]  # the refused one is not kept
    first, second = provider.requests
    assert "## Answer format" in first.system_text and '"age"' in first.system_text
    assert "not JSON" in second.messages[-1].text and "Ada is 36." in second.messages[-1].text
    assert not second.tools and [m.role.value for m in second.messages].count("assistant") == 0


async def test_two_invalid_answers_fail_the_turn_naming_the_problem():
    provider = FakeScriptedProvider([answer("Ada is 36."), answer('{"name": "Ada"}')])
    result, _ = await turn(provider, cfg=checked(SCHEMA))

    assert result.status is TurnStatus.FAILED and result.error_kind == "invalid_output"
    assert "'age' is a required property" in result.error


async def test_the_demo_model_writes_json_when_asked():
    cfg = config()
    turn_overrides_apply(cfg, {"response_format": SCHEMA}, native=DemoProvider.request_params)
    result, _ = await turn(DemoProvider(), cfg=cfg, message="hello")
    value = json.loads(result.text)
    assert not list(ArgumentsValidator(SCHEMA["json_schema"]["schema"]).iter_errors(value))
    assert "demo model" in value["name"]
    response = await DemoProvider().chat(ChatRequest(model="demo", messages=[Message.user("hi")],
                                                     response_format={"type": "json_object"}))
    assert "demo model" in json.loads(response.text)["answer"]
