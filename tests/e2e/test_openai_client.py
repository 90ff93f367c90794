"""The official ``openai`` Python client against a live stack (daphne, a Celery worker, the
embedded Redis, the demo model): completions with and without streaming, a tool-using turn, an
"ask" tool that nobody approves, every refusal as the SDK's own exception class, another team's
key, revoked and expired keys, and the rate limits at their exact boundary under concurrent
requests. The keys are made by the stack's seed (``API_KEYS`` in conftest)."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def ids(stack):
    return stack.ids


def client(stack, ids, key: str) -> openai.OpenAI:
    # No retries: a 429 or a 5xx must reach the test, not be retried away by the SDK.
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=ids["keys"][key], max_retries=0,
                         timeout=60)


def ask(api: openai.OpenAI, model: str, text: str, **kwargs):
    return api.chat.completions.create(model=model, messages=[{"role": "user", "content": text}],
                                       **kwargs)


def test_a_completion_comes_back_with_usage_and_its_trace(stack, ids):
    api = client(stack, ids, "alice-chat")
    raw = api.chat.completions.with_raw_response.create(
        model="helper", messages=[{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Hello there"}])
    completion = raw.parse()

    assert completion.object == "chat.completion" and completion.model == "helper"
    assert completion.choices[0].message.content.strip()
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    assert completion.usage.prompt_tokens_details.cached_tokens == 0
    extra = completion.model_extra["agentsite"]
    assert raw.headers["x-agentsite-trace-id"] == extra["trace_id"]
    assert extra["trace_url"].startswith(stack.url) and extra["status"] == "completed"


def test_streaming_yields_the_answer_then_usage(stack, ids):
    api = client(stack, ids, "alice-chat")
    chunks = list(ask(api, "helper", "Tell me about the weather in three sentences.", stream=True,
                      stream_options={"include_usage": True}))

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text) > 40
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 3  # really streamed
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.total_tokens > 0 and chunks[-1].choices == []
    assert len(chunks[-1].model_extra["agentsite"]["trace_id"]) == 32


def test_the_agents_tools_run_on_the_server(stack, ids):
    completion = ask(client(stack, ids, "alice-chat"), "helper", "What time is it?")
    extra = completion.model_extra["agentsite"]
    assert extra["iterations"] >= 2, (extra, completion.choices[0].message.content)
    assert completion.choices[0].message.content


def trace_of(stack, ids, trace_id: str) -> dict:
    """The trace with its steps, read back through the REST API."""
    response = httpx.get(f"{stack.url}/api/v1/traces/{trace_id}", timeout=30,
                         headers={"Authorization": f"Bearer {ids['keys']['alice-chat']}"})
    assert response.status_code == 200, response.text
    return response.json()


def test_an_ask_tool_nobody_approves_times_out_as_a_denial(stack, ids):
    completion = ask(client(stack, ids, "alice-chat"), "asker", "What is 2 + 3?")
    extra = completion.model_extra["agentsite"]
    assert extra["status"] == "completed"

    steps = trace_of(stack, ids, extra["trace_id"])["steps"]
    approval = next(s for s in steps if s["kind"] == "approval")
    tool = next(s for s in steps if s["kind"] == "tool_call")
    assert approval["status"] != "waiting" and tool["name"] == "calculator"
    assert tool["success"] is False and tool["error"] == "Not approved in time."
    assert "5" not in completion.choices[0].message.content.replace("2 + 3", "")


def test_a_client_that_goes_away_mid_stream_stops_the_turn(stack, ids):
    headers = {"Authorization": f"Bearer {ids['keys']['alice-chat']}"}
    body = {"model": "slow", "stream": True,
            "messages": [{"role": "user", "content": "Tell me a long story about the sea."}]}
    with httpx.stream("POST", f"{stack.url}/v1/chat/completions", json=body, headers=headers,
                      timeout=60) as response:
        trace_id = response.headers["x-agentsite-trace-id"]
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # the first words: then hang up
    trace = wait_for(lambda: (t := trace_of(stack, ids, trace_id))["status"] != "running" and t,
                     timeout=30, what="the turn to stop after the client left")
    assert trace["status"] == "cancelled", trace


def test_refusals_are_the_sdks_own_exceptions(stack, ids):
    bad = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="ask_00000000_wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.PermissionDeniedError, match="chat"):
        client(stack, ids, "alice-read").models.list()
    with pytest.raises(openai.NotFoundError, match="no agent of this team"):
        ask(client(stack, ids, "alice-chat"), "nobody", "hi")
    with pytest.raises(openai.BadRequestError) as caught:
        client(stack, ids, "alice-chat").chat.completions.create(model="helper", messages=[])
    assert caught.value.body["param"] == "messages"


def test_a_model_is_read_by_id_and_a_missing_endpoint_is_the_sdks_not_found(stack, ids):
    alice = client(stack, ids, "alice-chat")
    assert alice.models.retrieve("helper").id == "helper"
    with pytest.raises(openai.NotFoundError, match="no agent of this team"):
        alice.models.retrieve("rival")
    # Endpoints agentsite does not have answer in the API's shape, not with a CSRF page.
    with pytest.raises(openai.NotFoundError, match="no API endpoint at /v1/embeddings"):
        alice.embeddings.create(model="helper", input="hello")


def test_another_teams_key_does_not_see_this_teams_agents(stack, ids):
    rival = client(stack, ids, "charlie-chat")
    assert [m.id for m in rival.models.list()] == ["rival"]
    with pytest.raises(openai.NotFoundError):
        ask(rival, "helper", "hi")
    with pytest.raises(openai.NotFoundError):
        ask(client(stack, ids, "alice-chat"), "rival", "hi")


@pytest.mark.parametrize("key", ["alice-revoked", "alice-expired"])
def test_revoked_and_expired_keys_are_refused(stack, ids, key):
    with pytest.raises(openai.AuthenticationError, match=key.split("-")[1]):
        client(stack, ids, key).models.list()


def _concurrently(stack, ids, key: str, model: str, text: str, n: int) -> list[int]:
    def one(_: int) -> int:
        response = httpx.post(f"{stack.url}/v1/chat/completions", timeout=60,
                              headers={"Authorization": f"Bearer {ids['keys'][key]}"},
                              json={"model": model, "messages": [{"role": "user", "content": text}]})
        if response.status_code == 429:
            assert int(response.headers["retry-after"]) >= 1
        return response.status_code

    with ThreadPoolExecutor(n) as pool:
        return sorted(pool.map(one, range(n)))


def test_requests_per_minute_stop_exactly_at_the_limit_under_concurrency(stack, ids):
    statuses = _concurrently(stack, ids, "alice-rpm", "helper", "What is 1 + 1?", 9)
    assert statuses == [200] * 5 + [429] * 4
    with pytest.raises(openai.RateLimitError, match="5 requests per minute"):
        ask(client(stack, ids, "alice-rpm"), "helper", "hi")


def test_tokens_per_minute_stop_exactly_at_the_limit_under_concurrency(stack, ids):
    text = "x" * 100  # each request reserves its estimate: system 4 + ceil(100/4) + 4 = 33 tokens
    estimate = 4 + math.ceil(len(text) / 4) + 4
    assert 100 // estimate == 3
    statuses = _concurrently(stack, ids, "alice-tpm", "helper", text, 6)
    assert statuses == [200] * 3 + [429] * 3
