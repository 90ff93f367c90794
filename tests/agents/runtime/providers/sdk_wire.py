"""Wire fixtures built from the official SDKs' own types, and the SDKs' own reading of them.

Each fixture is a list of SDK objects (``openai.types.chat.ChatCompletionChunk``,
``anthropic.types.RawMessageStreamEvent`` variants, ``ChatCompletion``, ``Message``) serialised
as the API sends them: ``model_dump_json(exclude_unset=True)`` in ``data:`` lines (with the
``event:`` line Anthropic sends). The same bytes are served, through a mock transport, to the
project's providers and to the SDK clients, whole or in small network reads, so a test can
check that both read the same answer.

The SDK clients speak through their own HTTP library (``httpx`` in older releases, ``httpx2``
in newer ones); ``sdk_http`` finds which, so the fake edge is built from the same library.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import anthropic
import httpx
import openai
from openai.lib.streaming.chat import ChatCompletionStreamState

from agents.runtime.providers.base import ProviderError, StreamDone, StreamText, StreamThinking

from .fakes import FakeChunkedStream, FakeLLMServer

READ_SIZES = (None, 3, 7)  # whole, then 3- and 7-byte network reads
CUT = "peer closed connection without sending complete message body"


def sdk_http(client_class: type) -> ModuleType:
    """The HTTP library an SDK client is built on (its ``http_client`` parameter's type)."""
    annotation = inspect.signature(client_class.__init__).parameters["http_client"].annotation
    return importlib.import_module(str(annotation).split(".", 1)[0].strip("'\""))


# -- serialisation ----------------------------------------------------------------------------
def openai_sse(chunks: Sequence[Any], *, done: bool = True) -> bytes:
    lines = [b"data: " + c.model_dump_json(exclude_unset=True).encode() + b"\n\n"
             for c in chunks]
    if done:
        lines.append(b"data: [DONE]\n\n")
    return b"".join(lines)


def anthropic_sse(events: Sequence[Any]) -> bytes:
    return b"".join(
        f"event: {e.type}\ndata: {e.model_dump_json(exclude_unset=True)}\n\n".encode()
        for e in events)


# -- the fake edge, for the project's providers and for the SDKs -------------------------------
def server(body: bytes, read_size: int | None, *, broken: bool = False,
           content_type: str = "text/event-stream") -> FakeLLMServer:
    """A fake LLM server that sends ``body`` whole or in reads of ``read_size`` bytes; when
    ``broken``, the connection breaks after the body instead of ending."""
    error = httpx.RemoteProtocolError(CUT) if broken else None
    if read_size is None and not broken:
        return FakeLLMServer(httpx.Response(200, content=body,
                                            headers={"content-type": content_type}))
    stream = FakeChunkedStream(body, read_size or len(body) or 1, error)
    return FakeLLMServer(httpx.Response(200, stream=stream,
                                        headers={"content-type": content_type}))


def sdk_client(http: ModuleType, body: bytes, read_size: int | None, *,
               broken: bool = False, content_type: str = "text/event-stream") -> Any:
    """An ``AsyncClient`` of the SDK's HTTP library whose server sends the same bytes."""

    class Reads(http.AsyncByteStream):  # type: ignore[name-defined,misc]
        async def __aiter__(self) -> AsyncIterator[bytes]:
            size = read_size or len(body) or 1
            for start in range(0, len(body), size):
                yield body[start:start + size]
            if broken:
                raise http.RemoteProtocolError(CUT)

    def handler(request: Any) -> Any:
        return http.Response(200, stream=Reads(), headers={"content-type": content_type})

    return http.AsyncClient(transport=http.MockTransport(handler))


# -- what a provider read -----------------------------------------------------------------------
@dataclass
class Ours:
    """The project's provider's reading of a stream: its events, and either the final
    response or the error it raised."""

    events: list[Any] = field(default_factory=list)
    error: ProviderError | None = None

    @property
    def response(self) -> Any:
        assert self.error is None, f"the provider failed: {self.error!r}"
        done = self.events[-1]
        assert isinstance(done, StreamDone)
        return done.response

    @property
    def streamed_text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, StreamText))

    @property
    def streamed_thinking(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, StreamThinking))


async def read_stream(provider: Any, request: Any) -> Ours:
    ours = Ours()
    try:
        async for event in provider.stream(request):
            ours.events.append(event)
    except ProviderError as exc:
        ours.error = exc
    return ours


# -- what the openai SDK read ---------------------------------------------------------------------
@dataclass
class OpenAIReading:
    content: str
    refusal: str
    reasoning: str
    tool_calls: list[tuple[str, str, str]]
    finish_reason: str | None
    usage: dict[str, Any] | None
    error: Exception | None

    @property
    def visible(self) -> str:
        return self.content + self.refusal


def _openai_client(body: bytes, read_size: int | None, **kwargs: Any) -> openai.AsyncOpenAI:
    http = sdk_http(openai.AsyncOpenAI)
    return openai.AsyncOpenAI(api_key="sk-fixture", max_retries=0,
                              http_client=sdk_client(http, body, read_size, **kwargs))


def _usage(value: Any) -> dict[str, Any] | None:
    return value.model_dump(exclude_none=True) if value is not None else None


async def openai_sdk_stream(body: bytes, read_size: int | None, *,
                            broken: bool = False) -> OpenAIReading:
    """The SDK's own reading: ``chat.completions.create(stream=True)`` accumulated with its
    ``ChatCompletionStreamState``."""
    client = _openai_client(body, read_size, broken=broken)
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    error: Exception | None = None
    seen = False
    try:
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True)
        async for chunk in stream:
            state.handle_chunk(chunk)
            seen = True
    except Exception as exc:  # noqa: BLE001 - the SDK's failure is part of its reading
        error = exc
    if not seen:
        return OpenAIReading("", "", "", [], None, None, error)
    snapshot = state.current_completion_snapshot
    usage = _usage(snapshot.usage)
    if not snapshot.choices:
        return OpenAIReading("", "", "", [], None, usage, error)
    choice = snapshot.choices[0]
    return _openai_reading(choice.message, choice.finish_reason, usage, error)


async def openai_sdk_create(body: bytes) -> OpenAIReading:
    client = _openai_client(body, None, content_type="application/json")
    completion = await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    choice = completion.choices[0]
    return _openai_reading(choice.message, choice.finish_reason, _usage(completion.usage), None)


def _openai_reading(message: Any, finish: Any, usage: Any, error: Any) -> OpenAIReading:
    calls = [(c.id or "", c.function.name or "", c.function.arguments or "")
             for c in message.tool_calls or []]
    # Chat Completions has no reasoning field; servers add one, which the SDK keeps as an extra.
    reasoning = getattr(message, "reasoning_content", None) or ""
    return OpenAIReading(message.content or "", message.refusal or "", reasoning, calls, finish,
                         usage, error)


# -- what the anthropic SDK read -------------------------------------------------------------------
@dataclass
class AnthropicReading:
    blocks: list[dict[str, Any]]
    stop_reason: str | None
    usage: dict[str, Any]
    error: Exception | None

    @property
    def texts(self) -> list[str]:
        return [b["text"] for b in self.blocks if b["type"] == "text" and b["text"]]


def _anthropic_client(body: bytes, read_size: int | None, **kwargs: Any) -> anthropic.AsyncAnthropic:
    http = sdk_http(anthropic.AsyncAnthropic)
    return anthropic.AsyncAnthropic(api_key="sk-ant-fixture", max_retries=0,
                                    http_client=sdk_client(http, body, read_size, **kwargs))


async def anthropic_sdk_stream(body: bytes, read_size: int | None, *,
                               broken: bool = False) -> AnthropicReading:
    """The SDK's own reading: ``messages.stream(...).get_final_message()``, or its snapshot
    when the stream failed."""
    client = _anthropic_client(body, read_size, broken=broken)
    async with client.messages.stream(model="claude-sonnet-4-6", max_tokens=64,
                                      messages=[{"role": "user", "content": "hi"}]) as stream:
        try:
            message = await stream.get_final_message()
            error = None
        except Exception as exc:  # noqa: BLE001 - the SDK's failure is part of its reading
            message, error = stream.current_message_snapshot, exc
    return _anthropic_reading(message, error)


async def anthropic_sdk_create(body: bytes) -> AnthropicReading:
    client = _anthropic_client(body, None, content_type="application/json")
    message = await client.messages.create(model="claude-sonnet-4-6", max_tokens=64,
                                           messages=[{"role": "user", "content": "hi"}])
    return _anthropic_reading(message, None)


def _anthropic_reading(message: Any, error: Exception | None) -> AnthropicReading:
    blocks = [json.loads(b.model_dump_json(exclude_none=True, exclude={"parsed_output"}))
              for b in message.content]
    return AnthropicReading(blocks, message.stop_reason,
                            message.usage.model_dump(exclude_none=True), error)
