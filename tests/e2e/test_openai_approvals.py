"""Approvals and stops from code against a live stack (daphne, a Celery worker, the embedded
Redis, the demo model): an agent whose calculator asks for approval ("Careful") streams through
the official ``openai`` client and through LangChain; the stream tells the waiting call, the test
decides it (or stops the turn) through the REST API with the same key, and the stream goes on to
its end. The keys are made by the stack's seed (``API_KEYS`` in conftest)."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)
QUESTION = "What is 6 * 7?"  # the demo model asks the calculator for 6*7


def rest(stack, method: str, path: str, **kwargs) -> httpx.Response:
    key = stack.ids["keys"]["alice-chat"]
    url = path if path.startswith("http") else f"{stack.url}{path}"
    return httpx.request(method, url, headers={"Authorization": f"Bearer {key}"}, timeout=30, **kwargs)


def client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.ids["keys"]["alice-chat"],
                         max_retries=0, timeout=60)


def test_a_streamed_completion_waits_for_an_approval_given_through_the_api(stack):
    stream = client(stack).chat.completions.create(
        model="careful", stream=True, messages=[{"role": "user", "content": QUESTION}])

    text, told, finishes = "", [], []
    for chunk in stream:
        extra = (chunk.model_extra or {}).get("agentsite") or {}
        if "approval" in extra:
            told.append(extra)
            assert chunk.choices[0].delta.content is None  # an empty delta to any other client
            approval = extra["approval"]
            assert (approval["tool"], approval["arguments"]) == ("calculator", {"expression": "6*7"})
            assert approval["decide_url"].startswith(f"{stack.url}/api/v1/traces/{extra['trace_id']}/approvals/")
            listed = rest(stack, "GET", f"/api/v1/traces/{extra['trace_id']}/approvals").json()["data"]
            assert [a["call_id"] for a in listed] == [approval["call_id"]]
            decided = rest(stack, "POST", approval["decide_url"], json={"approved": True, "reason": "checked"})
            assert decided.status_code == 200, decided.text
        elif chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finishes.append(chunk.choices[0].finish_reason)

    assert len(told) == 1, told
    assert "42" in text and finishes[-1] == "stop"
    trace = rest(stack, "GET", f"/api/v1/traces/{told[0]['trace_id']}").json()
    assert trace["status"] == "completed"
    messages = rest(stack, "GET", f"/api/v1/conversations/{trace['conversation']}/messages").json()["data"]
    [call] = [c for m in messages for c in m["tool_calls"]]
    assert call == {**call, "name": "calculator", "status": "ok", "result": "42", "needs_approval": True,
                    "decided_by": "alice"}


def test_a_turn_waiting_for_approval_is_stopped_through_the_api(stack):
    stream = client(stack).chat.completions.create(
        model="careful", stream=True, messages=[{"role": "user", "content": QUESTION}])

    with pytest.raises(openai.APIError, match="Cancelled by alice") as caught:
        for chunk in stream:
            extra = (chunk.model_extra or {}).get("agentsite") or {}
            if "approval" in extra:
                trace_id = extra["trace_id"]
                stopped = rest(stack, "POST", f"/api/v1/traces/{trace_id}/stop")
                assert stopped.status_code == 200 and stopped.json()["stopping"] is True, stopped.text
    assert caught.value.body["code"] == "turn_cancelled"
    assert rest(stack, "GET", f"/api/v1/traces/{trace_id}").json()["status"] == "cancelled"


def test_langchain_streams_through_the_approval_chunk(stack):
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(base_url=f"{stack.url}/v1", api_key=stack.ids["keys"]["alice-chat"], model="careful",
                       max_retries=0, timeout=60)
    approved: list[str] = []

    def approve() -> None:  # another part of the application, which knows only the agent
        def waiting():
            for trace in rest(stack, "GET", "/api/v1/traces", params={"agent": "careful", "status": "running"}
                              ).json()["data"]:
                found = rest(stack, "GET", f"/api/v1/traces/{trace['id']}/approvals").json()["data"]
                if found:
                    return found[0]
            return None

        approval = wait_for(waiting, timeout=30, interval=0.2, what="a call waiting for approval")
        approved.append(rest(stack, "POST", approval["decide_url"], json={"approved": True}).status_code)

    helper = threading.Thread(target=approve, daemon=True)
    helper.start()
    text = "".join(str(chunk.content) for chunk in model.stream(QUESTION))
    helper.join(timeout=30)

    assert approved == [200]
    assert "42" in text
