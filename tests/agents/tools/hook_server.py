"""A real webhook receiver on 127.0.0.1 for the hooks' tests: it checks each request's
signature like a team's server would and answers what the test tells it to."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents.tools.hooks import signature_valid

SECRET = "whsec-test-0123456789"
Answer = Callable[[dict[str, Any]], tuple[int, Any]]  # payload -> (status, JSON or raw bytes)


@dataclass
class HookServer:
    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    bad_signatures: int = 0
    answer: Answer = lambda payload: (200, {"decision": "allow"})  # noqa: E731
    delay_s: float = 0.0


@contextmanager
def serve_hooks(settings) -> Iterator[HookServer]:
    """``HookServer`` on a free loopback port, with loopback allowed by the outbound policy
    (``settings``: pytest-django's fixture)."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    state: HookServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            ok = signature_valid(SECRET, timestamp=self.headers.get("X-Agentsite-Timestamp", ""),
                                 body=body, header=self.headers.get("X-Agentsite-Signature", ""))
            payload = json.loads(body)
            if not ok:
                state.bad_signatures += 1
                status, answer = 401, {"decision": "deny", "message": "bad signature"}
            else:
                state.received.append({"event": self.headers.get("X-Agentsite-Event"), **payload})
                status, answer = state.answer(payload)
            if state.delay_s:
                time.sleep(state.delay_s)
            raw = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the caller gave up (a time limit)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state = HookServer(url=f"http://127.0.0.1:{server.server_address[1]}/hook")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
