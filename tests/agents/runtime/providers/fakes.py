"""Fakes at the HTTP edge: an LLM server behind ``httpx.MockTransport``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx


def sse(*events: Any, done: bool = True, event_names: bool = False) -> bytes:
    """An SSE body: each item is a dict (sent as JSON) or a raw line string."""
    lines = []
    for item in events:
        if isinstance(item, str):
            lines.append(item + "\n")
            continue
        if event_names:
            lines.append(f"event: {item.get('type', '')}\n")
        lines.append(f"data: {json.dumps(item)}\n\n")
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


class FakeChunkedStream(httpx.AsyncByteStream):
    """Sends a body in small pieces, so lines and JSON are split across reads; with ``error``,
    the connection then breaks with that exception instead of ending."""

    def __init__(self, body: bytes, size: int = 7, error: Exception | None = None) -> None:
        self.body = body
        self.size = size
        self.error = error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), self.size):
            yield self.body[start:start + self.size]
        if self.error is not None:
            raise self.error


class FakeEndlessStream(httpx.AsyncByteStream):
    """Sends one chunk, then never ends; records when the client closes it."""

    def __init__(self, first: bytes) -> None:
        self.first = first
        self.closed = asyncio.Event()
        self.started = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.first
        self.started.set()
        await asyncio.Event().wait()
        yield b""  # pragma: no cover - never reached

    async def aclose(self) -> None:
        self.closed.set()


Handler = Callable[[httpx.Request], httpx.Response]


class FakeLLMServer:
    """Answers each request with the next scripted response (the last one repeats); every
    request is kept, with its JSON body, for assertions."""

    def __init__(self, *responses: httpx.Response | Exception | Handler) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        index = min(len(self.requests) - 1, len(self.responses) - 1)
        item = self.responses[index]
        if isinstance(item, Exception):
            raise item
        if callable(item) and not isinstance(item, httpx.Response):
            return item(request)
        return item

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handler))


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


def sse_response(body: bytes, *, chunk: int | None = None) -> httpx.Response:
    stream: Any = FakeChunkedStream(body, chunk) if chunk else body
    if isinstance(stream, bytes):
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    return httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})
