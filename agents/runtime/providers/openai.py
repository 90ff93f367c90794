"""OpenAI-compatible Chat Completions: OpenAI, OpenRouter, Ollama, vLLM, llama.cpp, LM Studio.

Wire mapping (``messages_to_openai``):

* the system blocks, and any system-role history message, become one leading system message;
* an assistant message's text is ``content`` and its tool uses are ``tool_calls`` with JSON-string
  arguments; ``content`` is always a string, ``""`` beside tool calls (llama-cpp-python's server
  answers ``null`` with a 500), and ``tool_calls`` is left out rather than sent empty; thinking
  blocks are not sent (Chat Completions has no field for them);
* a tool message becomes one ``{"role": "tool", "tool_call_id", "content"}`` per result, its
  content a string; an error result's content starts with ``Error:`` since the wire has no
  error flag.

Reading an answer: a ``refusal`` (``message.refusal``, ``delta.refusal``) is kept as visible text
and the stop reason becomes ``"refusal"``; an answer stopped by ``length`` keeps that stop reason,
and a tool call it cut off keeps an ``arguments_error`` instead of running. A stream that ends
without a finish reason and without ``[DONE]``, or with nothing readable, is a retryable error
carrying the text received so far (``ProviderError.partial_text``).

Tool-call arguments that are not a JSON object never fail the response: the call is kept with
``input={}`` and ``arguments_error`` holding the parse error and the raw text, for the loop to
report as the call's result.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..messages import Block, ImageBlock, Message, Role, TextBlock, ThinkingBlock, ToolUseBlock
from ..pricing import Usage
from ..tools import ToolSpec
from ._http import (
    DEFAULT_TIMEOUT_S,
    HttpProvider,
    cut_off_error,
    malformed_error,
    status_error,
)
from ._sse import iter_sse
from ._wire import (
    cut_tool_use,
    loads_object,
    new_call_id,
    parse_tool_arguments,
    system_texts,
    tool_instructions_text,
)
from .base import (
    REQUEST_PARAMS,
    Capabilities,
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Outcome,
    ProviderError,
    StreamDone,
    StreamEvent,
    StreamText,
    StreamThinking,
    SystemBlock,
    outcome_of,
)

# Base URLs of well-known OpenAI-compatible servers (local ones at their default ports).
OPENAI_COMPATIBLE_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "ollama": "http://localhost:11434/v1",
    "vllm": "http://localhost:8000/v1",
    "llamacpp": "http://localhost:8080/v1",
    "lmstudio": "http://localhost:1234/v1",
}

_OPENAI_VISION_PREFIXES = (
    "gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-4-turbo", "gpt-5", "o1", "o3", "o4",
)
_OPENAI_NO_VISION = ("o1-mini", "o1-preview", "o3-mini", "gpt-4o-audio", "gpt-4o-realtime")
# Names that signal an image-capable model on other servers (OpenRouter ids, Ollama tags).
_VISION_NAME_HINTS = (
    "vision", "-vl", "llava", "pixtral", "gemini", "claude-3", "claude-sonnet", "claude-opus",
    "claude-haiku", "gemma3", "gemma-3", "minicpm-v", "moondream", "llama-4", "llama4",
)


def tools_to_openai_format(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"type": "function",
         "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


# -- history -> wire ----------------------------------------------------------------------------
def messages_to_openai(system: Sequence[SystemBlock], messages: Sequence[Message],
                       extra_system: str = "") -> list[dict[str, Any]]:
    texts = system_texts(system, messages)
    if extra_system:
        texts.append(extra_system)
    wire: list[dict[str, Any]] = []
    if texts:
        wire.append({"role": "system", "content": "\n\n".join(texts)})
    for message in messages:
        if message.role == Role.SYSTEM:
            continue
        if message.role == Role.ASSISTANT:
            wire.append(_assistant_to_openai(message))
        elif message.role == Role.TOOL or message.tool_results_blocks:
            wire.extend(_tool_results_to_openai(message))
        else:
            wire.append({"role": "user", "content": _user_content_openai(message)})
    return wire


def _user_content_openai(message: Message) -> str | list[dict[str, Any]]:
    """A user message: its text, or text and image parts when it carries images."""
    images = [b for b in message.blocks if isinstance(b, ImageBlock) and b.data]
    if not images:
        return message.text
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
    parts.extend({"type": "image_url", "image_url": {"url": image.data_url}} for image in images)
    return parts


def _assistant_to_openai(message: Message) -> dict[str, Any]:
    calls = message.tool_uses
    entry: dict[str, Any] = {"role": "assistant", "content": message.text}
    if calls:
        entry["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name,
                          "arguments": json.dumps(call.input, ensure_ascii=False)}}
            for call in calls
        ]
    return entry


def _tool_results_to_openai(message: Message) -> list[dict[str, Any]]:
    entries = []
    for result in message.tool_results_blocks:
        content = str(result.output)
        if result.is_error and not content.lower().startswith("error"):
            content = f"Error: {content}"
        entries.append({"role": "tool", "tool_call_id": result.tool_use_id, "content": content})
    text = message.text
    if text:
        entries.append({"role": "user", "content": text})
    return entries


# -- wire -> history ----------------------------------------------------------------------------
def content_text(content: Any) -> str:
    """``content`` as a string, also when a server sends a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "output_text")
        )
    return ""


def _reasoning_text(source: dict[str, Any]) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = source.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _tool_use(call_id: Any, name: Any, arguments: Any) -> ToolUseBlock:
    parsed, error = parse_tool_arguments(arguments)
    return ToolUseBlock(id=str(call_id) if call_id else new_call_id(), name=str(name or ""),
                        input=parsed, arguments_error=error)


def _refusal_text(source: dict[str, Any]) -> str:
    value = source.get("refusal")
    return value if isinstance(value, str) else ""


def stop_reason_of(finish_reason: Any, refusal: str) -> str | None:
    """The response's stop reason: the server's ``finish_reason``, except that an answer that
    carries a refusal and otherwise ended normally is a ``"refusal"``."""
    finish = str(finish_reason) if finish_reason else None
    if refusal and outcome_of(finish) is Outcome.COMPLETE:
        return "refusal"
    return finish


def _assistant_message(reasoning: str, text: str, refusal: str,
                       calls: Sequence[tuple[Any, Any, Any]], stop_reason: str | None) -> Message:
    """The assistant message from its parts; ``calls`` are ``(id, name, raw arguments)``. In an
    answer stopped by the output limit the last call was cut off and is not runnable."""
    blocks: list[Block] = []
    if reasoning:
        blocks.append(ThinkingBlock(reasoning))
    if text:
        blocks.append(TextBlock(text))
    if refusal:
        blocks.append(TextBlock(refusal))
    cut = outcome_of(stop_reason) is Outcome.LENGTH
    for position, (call_id, name, arguments) in enumerate(calls):
        if cut and position == len(calls) - 1:
            blocks.append(cut_tool_use(str(call_id or ""), str(name or ""), arguments))
        else:
            blocks.append(_tool_use(call_id, name, arguments))
    return Message(Role.ASSISTANT, blocks)


def message_from_openai(data: dict[str, Any], finish_reason: Any = None) -> Message:
    """The assistant message of a non-streaming ``choices[0].message``."""
    calls = []
    for call in data.get("tool_calls") or []:
        if isinstance(call, dict):
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            calls.append((call.get("id"), function.get("name"), function.get("arguments")))
    refusal = _refusal_text(data)
    return _assistant_message(_reasoning_text(data), content_text(data.get("content")), refusal,
                              calls, stop_reason_of(finish_reason, refusal))


@dataclass(slots=True)
class _ToolCallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _StreamState:
    """A streamed response being reassembled from its chunks."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str = ""
    id: str = ""

    def feed(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        self.model = str(chunk.get("model") or self.model)
        self.id = str(chunk.get("id") or self.id)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) not in (0, None):
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if isinstance(delta, dict):
                events.extend(self._feed_delta(delta))
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return events

    def _feed_delta(self, delta: dict[str, Any]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        reasoning = _reasoning_text(delta)
        if reasoning:
            self.reasoning.append(reasoning)
            events.append(StreamThinking(reasoning))
        text = content_text(delta.get("content"))
        if text:
            self.text.append(text)
            events.append(StreamText(text))
        refusal = _refusal_text(delta)
        if refusal:
            self.refusal.append(refusal)
            events.append(StreamText(refusal))
        for position, call in enumerate(delta.get("tool_calls") or []):
            if isinstance(call, dict):
                self._feed_call(call, position)
        return events

    def _feed_call(self, call: dict[str, Any], position: int) -> None:
        index = self._call_index(call, position)
        parts = self.calls.setdefault(index, _ToolCallParts())
        if call.get("id") and not parts.id:
            parts.id = str(call["id"])
        function = call.get("function") or {}
        name = function.get("name")
        # Names may come in pieces; some servers repeat the whole name on every chunk.
        if isinstance(name, str) and name and name != parts.name:
            parts.name += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            parts.arguments.append(arguments)
        elif isinstance(arguments, dict):
            parts.arguments = [json.dumps(arguments)]

    def _call_index(self, call: dict[str, Any], position: int) -> int:
        index = call.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        # No index (some servers): match by id, a new id opens a new call, and a piece
        # without an id continues the last call.
        call_id = call.get("id")
        if call_id:
            for known, parts in self.calls.items():
                if parts.id == call_id:
                    return known
            return max(self.calls, default=-1) + 1
        return max(self.calls) if self.calls else position

    @property
    def has_content(self) -> bool:
        return bool(self.text or self.reasoning or self.refusal or self.calls)

    @property
    def partial_text(self) -> str:
        """The visible text streamed so far (what the chat has shown)."""
        return "".join(self.text) + "".join(self.refusal)

    @property
    def stop_reason(self) -> str | None:
        return stop_reason_of(self.finish_reason, "".join(self.refusal))

    def message(self) -> Message:
        calls = [(parts.id, parts.name, "".join(parts.arguments))
                 for _, parts in sorted(self.calls.items()) if parts.name or parts.arguments]
        return _assistant_message("".join(self.reasoning), "".join(self.text),
                                  "".join(self.refusal), calls, self.stop_reason)

    def raw(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "finish_reason": self.finish_reason,
                "usage": self.usage, "content": "".join(self.text),
                "refusal": "".join(self.refusal), "reasoning": "".join(self.reasoning),
                "tool_calls": [{"index": i, "id": c.id, "name": c.name,
                                "arguments": "".join(c.arguments)}
                               for i, c in sorted(self.calls.items())]}


# -- the provider -----------------------------------------------------------------------------

# The servers (by URL) that refused ``response_format`` ``json_schema`` and take the older
# ``{"type": "json_object", "schema": …}`` instead, as this process found out.
_SCHEMA_AS_JSON_OBJECT: set[str] = set()


def _json_object_with_schema(response_format: dict[str, Any]) -> dict[str, Any]:
    schema = (response_format.get("json_schema") or {}).get("schema")
    return {"type": "json_object", **({"schema": schema} if isinstance(schema, dict) else {})}

class OpenAIProvider(HttpProvider):
    """Chat Completions at ``{base_url}/chat/completions``. ``api_key`` may be empty for local
    servers. ``max_tokens_param`` defaults to ``max_completion_tokens`` on api.openai.com
    (newer models refuse ``max_tokens``) and ``max_tokens`` elsewhere; ``stream_usage`` sends
    ``stream_options.include_usage`` (turn it off for a server that rejects it)."""

    kind = "openai"
    default_capabilities = Capabilities(native_tool_calling=True, streaming=True)
    request_params = frozenset(REQUEST_PARAMS)

    def __init__(
        self,
        base_url: str = OPENAI_COMPATIBLE_BASE_URLS["openai"],
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        extra_headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        capabilities: dict[str, Any] | None = None,
        http_client: Any = None,
        transport: Any = None,
        name: str = "",
        max_tokens_param: str | None = None,
        stream_usage: bool = True,
    ) -> None:
        self.is_openai = urlsplit(base_url).hostname == "api.openai.com"
        self.max_tokens_param = max_tokens_param or (
            "max_completion_tokens" if self.is_openai else "max_tokens")
        self.stream_usage = stream_usage
        super().__init__(base_url=base_url, api_key=api_key, timeout=timeout,
                         extra_headers=extra_headers, extra_body=extra_body,
                         capabilities=capabilities, http_client=http_client, transport=transport,
                         name=name)

    @property
    def url(self) -> str:
        if self.base_url.endswith("/chat/completions"):
            return self.base_url
        return f"{self.base_url}/chat/completions"

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def model_capabilities(self, model: str | None) -> Capabilities:
        name = (model or "").lower().rsplit("/", 1)[-1]
        if self.is_openai:
            vision = name.startswith(_OPENAI_VISION_PREFIXES) and not name.startswith(
                _OPENAI_NO_VISION)
        else:
            vision = any(hint in (model or "").lower() for hint in _VISION_NAME_HINTS)
        # OpenAI caches long prompt prefixes by itself; other servers are not assumed to.
        return Capabilities(native_tool_calling=True, vision=vision,
                            prompt_caching=self.is_openai, streaming=True)

    def payload(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        native = bool(request.tools) and self.capabilities_for(request.model).native_tool_calling
        extra_system = ""
        if request.tools and not native:
            extra_system = tool_instructions_text(request.tools)
        body: dict[str, Any] = {
            "model": request.model,
            "messages": messages_to_openai(request.system, request.messages, extra_system),
        }
        if native and request.tools:
            body["tools"] = tools_to_openai_format(request.tools)
        params = request.sampling(self.request_params)
        max_tokens = params.pop("max_tokens", None)
        if max_tokens:
            body[self.max_tokens_param] = max_tokens
        if self.url in _SCHEMA_AS_JSON_OBJECT and (params.get("response_format") or {}).get("type") == "json_schema":
            params["response_format"] = _json_object_with_schema(params["response_format"])
        body.update(params)  # the wire names are the request's: temperature, top_p, stop, seed …
        if stream:
            body["stream"] = True
            if self.stream_usage:
                body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    def _schema_refused(self, request: ChatRequest, exc: ProviderError) -> bool:
        """Whether the server refused the ``json_schema`` form of ``response_format`` (servers
        such as llama-cpp-python's take only ``{"type": "json_object", "schema": …}``): from
        then on this server is sent that form."""
        asked = (request.response_format or {}).get("type") == "json_schema"
        text = f"{exc.message} {exc.detail or ''}".lower()
        if (asked and self.url not in _SCHEMA_AS_JSON_OBJECT and exc.status in (400, 422, 500)
                and "json_schema" in text and "response_format" in text):
            _SCHEMA_AS_JSON_OBJECT.add(self.url)
            return True
        return False

    async def chat(self, request: ChatRequest) -> ChatResponse:
        try:
            return await self._chat(request)
        except ProviderError as exc:
            if not self._schema_refused(request, exc):
                raise
        return await self._chat(request)

    async def _chat(self, request: ChatRequest) -> ChatResponse:
        data = await self.post_json(self.url, self.payload(request, stream=False), request.model)
        if data.get("error") and not data.get("choices"):
            raise self._embedded_error(data["error"], request.model)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise malformed_error("it had no choices", provider=self.name, model=request.model)
        choice = choices[0]
        wire_message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        finish = choice.get("finish_reason")
        message = message_from_openai(wire_message, finish)
        usage = Usage.from_openai(data.get("usage") if isinstance(data.get("usage"), dict) else None)
        message.usage = usage
        return ChatResponse(message=message, usage=usage,
                            model=str(data.get("model") or request.model), provider=self.name,
                            stop_reason=stop_reason_of(finish, _refusal_text(wire_message)),
                            raw=data)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        started = False
        try:
            async for event in self._stream(request):
                started = True
                yield event
            return
        except ProviderError as exc:
            if started or not self._schema_refused(request, exc):
                raise
        async for event in self._stream(request):
            yield event

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        state = _StreamState()
        finished = False
        events = 0
        opened = False
        try:
            async with self.open_stream(self.url, self.payload(request, stream=True),
                                        request.model) as response:
                opened = True
                async for event in iter_sse(self.stream_lines(response, request.model)):
                    events += 1
                    if event.data.strip() == "[DONE]":
                        finished = True
                        break
                    chunk = loads_object(event.data)
                    if chunk is None:
                        continue
                    if chunk.get("error") and not chunk.get("choices"):
                        raise self._embedded_error(chunk["error"], request.model)
                    for item in state.feed(chunk):
                        yield item
        except ProviderError as exc:
            if not (opened and events == 0 and exc.kind == ErrorKind.NETWORK):
                # A connection cut or an error chunk mid-answer: the caller may keep what came.
                exc.partial_text = exc.partial_text or state.partial_text
                raise
        if events == 0:
            # Accepted, then nothing (an empty 200, or the connection closed before a byte):
            # llama-cpp-python's server answers a prompt too long for its window so, and the
            # same request unstreamed with the error that says so. Ask that way once, so the
            # error is the server's own (an overflow is then handled as one). A connection the
            # server closed under the stream may still be in the pool: a second try gets a new one.
            try:
                response = await self.chat(request)
            except ProviderError as exc:
                if exc.kind != ErrorKind.NETWORK:
                    raise
                response = await self.chat(request)
            if response.text:
                yield StreamText(response.text)
            yield StreamDone(response)
            return
        if state.finish_reason is None and not finished:
            raise cut_off_error(provider=self.name, model=request.model,
                                partial_text=state.partial_text)
        if state.finish_reason is None and not state.has_content:
            # llama-cpp-python's server, for one, answers a too-long prompt with an empty stream.
            raise malformed_error("the stream held no answer and no finish reason (some servers "
                                  "do this when the conversation is too long for the model's "
                                  "context window)", provider=self.name, model=request.model)
        message = state.message()
        usage = Usage.from_openai(state.usage)
        message.usage = usage
        yield StreamDone(ChatResponse(message=message, usage=usage,
                                      model=state.model or request.model, provider=self.name,
                                      stop_reason=state.stop_reason, raw=state.raw()))

    def _embedded_error(self, error: Any, model: str) -> ProviderError:
        """An error object inside a 200 response or a stream (OpenRouter and some local
        servers report failures this way)."""
        code = error.get("code") if isinstance(error, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 500
        return status_error(status, {}, json.dumps({"error": error}), provider=self.name,
                            model=model, secrets=self._secrets)
