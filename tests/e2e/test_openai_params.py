"""The official ``openai`` client against a live stack (daphne, a Celery worker, the embedded
Redis, the demo model): a request's ``max_tokens`` caps the answer, which ends with
``finish_reason == "length"``, streamed and not; a field that cannot be honoured is the SDK's
``BadRequestError`` naming it; LangChain's ``with_structured_output`` gets the JSON it asks for
(the demo model writes it when asked), and its ``bind_tools`` is refused naming ``tools``. The keys are made by the stack's seed (``API_KEYS`` in conftest)."""

from __future__ import annotations

import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

pytestmark = pytest.mark.timeout(120)
STORY = [{"role": "user", "content": "Tell me a story"}]


def client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.ids["keys"]["alice-chat"],
                         max_retries=0, timeout=60)


def test_max_tokens_gives_a_short_answer_cut_for_length(stack):
    api = client(stack)
    whole = api.chat.completions.create(model="helper", messages=STORY)
    assert whole.choices[0].finish_reason == "stop" and whole.usage.completion_tokens > 100

    cut = api.chat.completions.create(model="helper", messages=STORY, max_tokens=5)

    assert cut.choices[0].finish_reason == "length"
    assert 0 < cut.usage.completion_tokens <= 5
    assert whole.choices[0].message.content.startswith(cut.choices[0].message.content.strip())


def test_max_completion_tokens_streamed_ends_with_length(stack):
    chunks = list(client(stack).chat.completions.create(
        model="helper", messages=STORY, max_completion_tokens=5, stream=True,
        stream_options={"include_usage": True}))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"
    assert 0 < chunks[-1].usage.completion_tokens <= 5


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"logprobs": True}, "logprobs"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format.json_schema"),
    ({"extra_body": {"top_k": 5}}, "top_k"),
])
def test_what_cannot_be_honoured_is_a_bad_request_naming_it(stack, kwargs, param):
    with pytest.raises(openai.BadRequestError) as raised:
        client(stack).chat.completions.create(model="helper", messages=STORY, **kwargs)
    assert raised.value.body["param"] == param


class Answer(BaseModel):
    answer: str


class Reply(BaseModel):
    answer: str
    confident: bool


@pytest.mark.parametrize("method", ["json_schema", "json_mode"])
def test_langchains_structured_output_in_both_modes(stack, method):
    llm = ChatOpenAI(model="helper", base_url=f"{stack.url}/v1", api_key=stack.ids["keys"]["alice-chat"],
                     max_retries=0, timeout=60)
    if method == "json_mode":
        # The shape is the prompt's to tell; the demo model's JSON object is {"answer": ...}.
        reply = llm.with_structured_output(Answer, method="json_mode").invoke(
            'Hello. Answer as JSON: {"answer": "..."}')
        assert isinstance(reply, Answer) and "demo model" in reply.answer
        return
    reply = llm.with_structured_output(Reply, method=method).invoke("Hello")
    assert isinstance(reply, Reply) and "demo model" in reply.answer and reply.confident is True


def test_langchains_bind_tools_is_refused_naming_tools(stack):
    llm = ChatOpenAI(model="helper", base_url=f"{stack.url}/v1", api_key=stack.ids["keys"]["alice-chat"],
                     max_retries=0, timeout=60)

    def lookup(query: str) -> str:
        """Look something up."""
        return query

    with pytest.raises(openai.BadRequestError) as refused:
        llm.bind_tools([lookup]).invoke("Hello")
    assert refused.value.body["param"] == "tools"
    assert refused.value.body["code"] == "client_tools_unsupported"
