"""The chaos suite's model: a fake OpenAI-compatible server (the LLM edge, faked) that answers
slowly, calls tools, and counts how often each tool call is executed.

A real HTTP server on a loopback port, speaking the chat-completions wire with streaming
(server-sent events in chunked transfer, ``tool_calls`` deltas, a usage chunk, ``[DONE]``).
Each turn's user message carries a token (``[chaos:<token>]``); from it and the number of tool
results that follow it, every answer is decided, so a request that is sent again (a retry, or
a turn resumed on another worker) gets the same answer and the same call ids:

1. the first request asks for ``lookup`` (an HTTP tool pointing back at this server's
   ``/tool/lookup``, which takes ``tool_latency_s`` to answer and records every execution);
2. the second asks for the built-in ``calculator``;
3. the third answers in words.

Every answer streams over ``latency_s``, so a worker killed at a random moment is usually in a
model request or a tool call. Under ``/faulty/`` a share of requests (``fault_rate``) fail as
real servers do: a 5xx, a stream cut mid-answer, a stream that stops without a finish reason.
Which ones is decided by the seed, the token, the step and the attempt, not by arrival order,
so a run is reproducible.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MODEL = "chaos-model"
LOOKUP_TOOL = "lookup"
FAULTS = ("500", "502", "503", "cut", "no_done")
TOKEN = re.compile(r"\[chaos:([A-Za-z0-9_-]+)\]")
EXPRESSION = "17 * 23"
LOOKUP_VALUE = 391


def final_answer(token: str) -> str:
    return f"Looked up and computed: 17 × 23 = 391, as the lookup said. [done:{token}]"


def call_id(token: str, step: int) -> str:
    return f"call_{token}_{step}"


@dataclass
class Execution:
    """One run of the lookup tool: when it started and, if it answered, when."""

    key: str
    started: float
    finished: float | None = None


class FakeModelServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *, latency_s: float = 2.0, tool_latency_s: float = 2.0,
                 fault_rate: float = 0.3, seed: int = 0, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.latency_s = latency_s
        self.tool_latency_s = tool_latency_s
        self.fault_rate = fault_rate
        self.seed = seed
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.attempts: Counter[tuple[str, int]] = Counter()
        self.executions: dict[str, list[Execution]] = {}
        # Tool call id -> when a model request first carried its result: from then on the turn
        # had the result in hand, so running the call again would be a duplicate.
        self.results_seen: dict[str, float] = {}
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> FakeModelServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True, name="fake-model")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self.server_close()

    # -- decisions ------------------------------------------------------------------------------
    def fault_for(self, token: str, step: int, *, faulty: bool) -> str:
        """"ok" or the fault this attempt at ``step`` of ``token``'s turn plays."""
        with self.lock:
            self.attempts[(token, step)] += 1
            attempt = self.attempts[(token, step)]
        if not faulty:
            return "ok"
        chooser = random.Random(f"{self.seed}:{token}:{step}:{attempt}")
        fault = chooser.choice(FAULTS) if chooser.random() < self.fault_rate else "ok"
        with self.lock:
            self.faults[fault] += 1
        return fault

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A worker killed mid-request resets its connection: expected here, not worth a
        traceback."""

    def execution_start(self, key: str) -> Execution:
        run = Execution(key, time.time())
        with self.lock:
            self.executions.setdefault(key, []).append(run)
        return run

    def results_arrived(self, messages: list[dict[str, Any]]) -> None:
        now = time.time()
        with self.lock:
            for message in messages:
                call = message.get("tool_call_id") if message.get("role") == "tool" else None
                if isinstance(call, str) and call not in self.results_seen:
                    self.results_seen[call] = now

    def execution_log(self) -> dict[str, list[Execution]]:
        with self.lock:
            return {key: list(runs) for key, runs in self.executions.items()}


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, *,
           usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-chaos", "object": "chat.completion.chunk", "model": MODEL,
                            "choices": [] if delta is None and finish is None else
                            [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n".encode()


def turn_position(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The turn's token and how many tool results follow its user message (the step, from 0)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") != "user":
            continue
        found = TOKEN.search(_text(message.get("content")))
        if found:
            results = sum(1 for m in messages[index + 1:] if m.get("role") == "tool")
            return found.group(1), results
    return "", 0


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeModelServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server protocol
        url = urlsplit(self.path)
        if url.path != "/tool/lookup":
            return self._json(404, {"error": "not found"})
        key = (parse_qs(url.query).get("key") or [""])[0]
        run = self.server.execution_start(key)
        time.sleep(self.server.tool_latency_s)
        try:
            self._json(200, {"key": key, "value": LOOKUP_VALUE})
        except OSError:
            return  # the worker went away mid-call
        run.finished = time.time()

    def do_POST(self) -> None:  # noqa: N802
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        except ValueError:
            return self._json(400, {"error": {"message": "the body is not JSON"}})
        if not self.path.endswith("/chat/completions"):
            return self._json(404, {"error": {"message": "not found"}})
        faulty = self.path.startswith("/faulty/")
        self.server.requests["faulty" if faulty else "steady"] += 1
        messages = body.get("messages") or []
        self.server.results_arrived(messages)
        token, step = turn_position(messages)
        fault = self.server.fault_for(token, step, faulty=faulty)
        try:
            self._answer(body, token, step, fault)
        except OSError:
            pass  # the worker went away mid-stream

    def _answer(self, body: dict[str, Any], token: str, step: int, fault: str) -> None:
        if fault in ("500", "502", "503"):
            return self._json(int(fault), {"error": {"message": f"upstream error {fault}"}})
        usage = {"prompt_tokens": max(len(json.dumps(body.get("messages"))) // 4, 1)}
        if step == 0 or step == 1:
            name = LOOKUP_TOOL if step == 0 else "calculator"
            arguments = {"key": call_id(token, 1)} if step == 0 else {"expression": EXPRESSION}
            text = "Let me look that up first." if step == 0 else "Now the arithmetic."
            pieces = [_chunk({"role": "assistant", "content": w if i == 0 else f" {w}"})
                      for i, w in enumerate(text.split(" "))]
            encoded = json.dumps(arguments)
            half = len(encoded) // 2
            pieces += [
                _chunk({"tool_calls": [{"index": 0, "id": call_id(token, step + 1), "type": "function",
                                        "function": {"name": name, "arguments": ""}}]}),
                _chunk({"tool_calls": [{"index": 0, "function": {"arguments": encoded[:half]}}]}),
                _chunk({"tool_calls": [{"index": 0, "function": {"arguments": encoded[half:]}}]}),
            ]
            finish = "tool_calls"
        else:
            text = final_answer(token)
            pieces = [_chunk({"role": "assistant", "content": w if i == 0 else f" {w}"})
                      for i, w in enumerate(text.split(" "))]
            finish = "stop"
        usage["completion_tokens"] = len(pieces) * 3
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if fault == "cut":
            return self._stream(pieces[: max(len(pieces) // 2, 1)], terminate=False)
        if fault == "no_done":
            return self._stream(pieces[: max(len(pieces) // 2, 1)])
        self._stream([*pieces, _chunk({}, finish), _chunk(usage=usage), b"data: [DONE]\n\n"])

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, pieces: list[bytes], *, terminate: bool = True) -> None:
        """Chunked server-sent events spread over the server's latency. Without ``terminate``
        the connection is dropped mid-body, as a crashed upstream does."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        pause = self.server.latency_s / max(len(pieces), 1)
        for piece in pieces:
            time.sleep(pause)
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.flush()
        if terminate:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        else:
            self.close_connection = True
            self.connection.shutdown(2)
