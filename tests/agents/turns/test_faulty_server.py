"""Turns against an OpenAI-compatible server that fails 30 % of its requests in every way the
real ones do: a 500, a 429 with Retry-After, a timeout, a stream cut mid-answer, a stream that
ends with no finish reason and no ``[DONE]``, and unreadable chunks followed by ``[DONE]``.

The server is a real HTTP server on a loopback port (``FakeFaultyServer``, the LLM edge's fake);
everything between it and the stored messages is the product's own: the OpenAI provider over
httpx, the reliable wrapper with a fallback provider, the loop, the recorder. No truncated
answer may be stored as complete: every turn either completes with a whole answer (by retry or
fallback) or fails with one plain sentence.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.models import Message, Provider
from tests.members import member_of

PRIMARY_ANSWER = "The primary answer is complete."
FALLBACK_ANSWER = "The fallback answer is complete."
FAULTS = ("500", "429", "timeout", "cut", "no_done", "garbage")


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    body = {"id": "chatcmpl-fault", "object": "chat.completion.chunk", "model": "faulty",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class FakeFaultyServer(ThreadingHTTPServer):
    """Answers ``/primary/v1/chat/completions`` with a fault on 30 % of requests (seeded), and
    ``/fallback/v1/chat/completions`` always well. Neither reports usage, as llama.cpp does not."""

    daemon_threads = True

    def __init__(self, seed: int) -> None:
        super().__init__(("127.0.0.1", 0), FaultyHandler)
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.played: Counter[str] = Counter()

    def next_fault(self) -> str:
        with self.lock:
            fault = self.random.choice(FAULTS) if self.random.random() < 0.3 else "ok"
            self.played[fault] += 1
            return fault

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class FaultyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeFaultyServer

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.startswith("/fallback/"):
            return self.stream_answer(FALLBACK_ANSWER)
        fault = self.server.next_fault()
        if fault == "500":
            return self.json_error(500, {"error": {"message": "Internal server error"}})
        if fault == "429":
            return self.json_error(429, {"error": {"message": "Rate limit reached"}},
                                   {"retry-after": "0"})
        if fault == "timeout":
            time.sleep(1.6)  # the provider's timeout is 1 s
            return self.json_error(500, {"error": {"message": "too late"}})
        if fault == "garbage":
            return self.stream_raw([b"data: {not json\n\n", b"data: \x00\x01garbage\n\n",
                                    b"data: [DONE]\n\n"])
        if fault in ("cut", "no_done"):
            return self.stream_raw([chunk("The primary "), chunk("answer ")],
                                   terminate=fault == "no_done")
        return self.stream_answer(PRIMARY_ANSWER)

    def json_error(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {"content-type": "application/json", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def stream_answer(self, text: str) -> None:
        words = text.split(" ")
        pieces = [chunk(w if i == 0 else f" {w}") for i, w in enumerate(words)]
        self.stream_raw([*pieces, chunk(finish="stop"), b"data: [DONE]\n\n"])

    def stream_raw(self, pieces: list[bytes], *, terminate: bool = True) -> None:
        """Chunked transfer: a cut leaves out the final empty chunk and closes the socket, which
        the client sees as a connection broken mid-body."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for piece in pieces:
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.flush()
        if terminate:
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)


@pytest.fixture
def faulty_server(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # the operator allows this model server
    server = FakeFaultyServer(seed=9)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_no_truncated_answer_is_stored_as_complete(faulty_server, make_agent, alice, sent_turns,
                                                   use_redis, transactional_db):
    from agents.chat.services import conversation_create
    from agents.turns.services import turn_start
    from agents.turns.tasks import turn_run
    from traces.models import Step, Trace

    agent = make_agent(name="Faulty", tools=(),
                       fallbacks=[{"provider": "Healthy fallback", "model": "fallback-model"}])
    Provider.objects.filter(pk=agent.provider_id).update(
        kind="openai", base_url=f"{faulty_server.url}/primary/v1", timeout_s=1)
    Provider.objects.create(team=agent.team, name="Healthy fallback", kind="openai",
                            base_url=f"{faulty_server.url}/fallback/v1", timeout_s=5)
    agent.model = "faulty-model"
    agent.save()

    outcomes: Counter[str] = Counter()
    for number in range(20):
        conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
        trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text=f"question {number}")
        status = turn_run(trace.pk)
        trace.refresh_from_db()
        answer = Message.objects.filter(conversation=conversation, role="assistant").last()
        outcomes[status] += 1
        if status == "completed":
            # A whole answer, from the primary or the fallback, never a cut-off prefix of one.
            assert answer is not None and answer.text in (PRIMARY_ANSWER, FALLBACK_ANSWER), answer.text
            assert answer.outcome == ""
            steps = Step.objects.filter(trace=trace, kind="llm_request", status="ok")
            # The server reported no usage: estimated and flagged, never a silent zero.
            assert all(s.meta.get("usage_estimated") and s.output_tokens > 0 for s in steps)
        else:
            assert status == "failed", status
            assert "\n" not in trace.error and len(trace.error) < 400, trace.error

    # The seed plays every kind of fault; retries and the fallback complete nearly every turn.
    assert set(faulty_server.played) >= {"ok", *FAULTS}, faulty_server.played
    assert outcomes["completed"] >= 18, outcomes
    assert not Trace.objects.filter(status="completed", error__gt="").exists()
