"""Anthropic Messages API.

Wire mapping (``messages_to_anthropic``):

* the system prompt is a list of text blocks; with prompt caching on, the last block of each
  run of cacheable (static) blocks carries ``cache_control: {"type": "ephemeral"}`` (caching is
  by prefix, so one marker covers the run; the API allows four markers);
* system-role history messages are appended to the system blocks (the API has no system role);
* tool messages become user messages of ``tool_result`` blocks (``is_error`` kept), and
  consecutive user-side messages are merged, tool results first, as the API requires;
* thinking blocks are sent back with their signature; unsigned ones (from another provider) are
  dropped, since the API refuses them; empty text blocks are dropped for the same reason.

Reading an answer: blocks keep their order; text blocks that a tool call or thinking separates
are separate paragraphs (``Message.text`` joins them with a blank line, and the stream sends the
same blank line as text, so the streamed text and the final text agree). ``max_tokens`` and
``refusal`` stop reasons are kept; a tool call the output limit cut off keeps an
``arguments_error`` instead of running. An ``error`` event, a broken connection or a stream that
ends before the stop reason is a ``ProviderError`` carrying the text streamed so far.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages import (
    TEXT_RUN_SEPARATOR,
    Block,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
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
from ._wire import cut_tool_use, loads_object, new_call_id, parse_tool_arguments
from .base import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Outcome,
    ProviderError,
    StreamDone,
    StreamEvent,
    StreamText,
    StreamThinking,
    SystemBlock,
    outcome_of,
)

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
MAX_CACHE_MARKERS = 4
EPHEMERAL = {"type": "ephemeral"}

# The status each error type of the API stands for (stream ``error`` events carry no status).
_ERROR_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def tools_to_anthropic(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in tools]


def system_to_anthropic(system: Sequence[SystemBlock], messages: Sequence[Message],
                        *, caching: bool) -> list[dict[str, Any]]:
    parts = [(b.text, b.cacheable) for b in system if b.text]
    parts.extend((m.text, False) for m in messages if m.role == Role.SYSTEM and m.text)
    blocks: list[dict[str, Any]] = []
    markers = 0
    for index, (text, cacheable) in enumerate(parts):
        block: dict[str, Any] = {"type": "text", "text": text}
        run_ends = index + 1 == len(parts) or not parts[index + 1][1]
        if caching and cacheable and run_ends and markers < MAX_CACHE_MARKERS:
            block["cache_control"] = dict(EPHEMERAL)
            markers += 1
        blocks.append(block)
    return blocks


def messages_to_anthropic(messages: Sequence[Message]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == Role.SYSTEM:
            continue
        role = "assistant" if message.role == Role.ASSISTANT else "user"
        content = _content_to_anthropic(message.blocks, assistant=role == "assistant")
        if not content:
            if role == "assistant":
                continue
            content = [{"type": "text", "text": "(empty message)"}]
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(content)
        else:
            wire.append({"role": role, "content": content})
    for entry in wire:
        if entry["role"] == "user":
            # Tool results must open the user message that answers the tool uses.
            entry["content"].sort(key=lambda b: b.get("type") != "tool_result")
    return wire


def _content_to_anthropic(blocks: Sequence[Block], *, assistant: bool) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            if block.text.strip():
                content.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingBlock):
            if assistant and block.signature:
                content.append({"type": "thinking", "thinking": block.thinking,
                                "signature": block.signature})
        elif isinstance(block, ToolUseBlock):
            if assistant:
                content.append({"type": "tool_use", "id": block.id, "name": block.name,
                                "input": block.input})
        elif isinstance(block, ImageBlock):
            if not assistant and block.data:
                content.append({"type": "image", "source": {"type": "base64", "media_type": block.media_type,
                                                            "data": block.data}})
        elif isinstance(block, ToolResultBlock):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
            if block.output:
                result["content"] = block.output
            if block.is_error:
                result["is_error"] = True
            content.append(result)
    return content


def message_from_anthropic(content: Any, stop_reason: str | None = None) -> Message:
    blocks: list[Block] = []
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "text":
            blocks.append(TextBlock(str(item.get("text", ""))))
        elif kind == "thinking":
            blocks.append(ThinkingBlock(str(item.get("thinking", "")), item.get("signature")))
        elif kind == "tool_use":
            parsed, error = parse_tool_arguments(item.get("input"))
            blocks.append(ToolUseBlock(id=str(item.get("id") or new_call_id()),
                                       name=str(item.get("name", "")), input=parsed,
                                       arguments_error=error))
    return _cut_last_tool_use(blocks, stop_reason, content)


def _cut_last_tool_use(blocks: list[Block], stop_reason: str | None, raw: Any) -> Message:
    """In an answer stopped by the output limit, a tool use that is the last block was cut off
    in its arguments: it is kept, but not runnable."""
    if blocks and isinstance(blocks[-1], ToolUseBlock) \
            and outcome_of(stop_reason) is Outcome.LENGTH:
        last = blocks[-1]
        blocks[-1] = cut_tool_use(last.id, last.name, raw)
    return Message(Role.ASSISTANT, blocks)


@dataclass(slots=True)
class _BlockParts:
    type: str
    text: list[str] = field(default_factory=list)
    signature: str | None = None
    id: str = ""
    name: str = ""
    input: Any = None


@dataclass(slots=True)
class _StreamState:
    blocks: dict[int, _BlockParts] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    stopped: bool = False
    model: str = ""
    id: str = ""
    # The visible text streamed so far, and whether a thinking or tool-use block came after
    # it (then the next text opens a new paragraph, as in ``Message.text``).
    shown: list[str] = field(default_factory=list)
    after_other_block: bool = False

    @property
    def partial_text(self) -> str:
        return "".join(self.shown)

    def _text(self, parts: _BlockParts, text: str) -> list[StreamEvent]:
        parts.text.append(text)
        events: list[StreamEvent] = []
        if self.shown and self.after_other_block:
            self.shown.append(TEXT_RUN_SEPARATOR)
            events.append(StreamText(TEXT_RUN_SEPARATOR))
        self.after_other_block = False
        self.shown.append(text)
        events.append(StreamText(text))
        return events

    def merge_usage(self, usage: Any) -> None:
        # message_start reports input and cache counts, message_delta the (cumulative) output
        # count and, on newer API versions, cumulative input counts too: later values replace
        # earlier ones, so nothing is counted twice.
        if isinstance(usage, dict):
            self.usage.update({k: v for k, v in usage.items() if v is not None})

    def start(self, index: int, block: dict[str, Any]) -> list[StreamEvent]:
        kind = str(block.get("type", ""))
        parts = self.blocks[index] = _BlockParts(kind)
        if kind in ("thinking", "tool_use"):
            self.after_other_block = True
        if kind == "tool_use":
            parts.id = str(block.get("id") or "")
            parts.name = str(block.get("name") or "")
            parts.input = block.get("input")
        elif kind == "text" and block.get("text"):
            return self._text(parts, str(block["text"]))
        elif kind == "thinking":
            parts.signature = block.get("signature")
            if block.get("thinking"):
                parts.text.append(str(block["thinking"]))
                return [StreamThinking(str(block["thinking"]))]
        return []

    def delta(self, index: int, delta: dict[str, Any]) -> list[StreamEvent]:
        kind = delta.get("type")
        parts = self.blocks.get(index)
        if parts is None:
            parts = self.blocks[index] = _BlockParts(
                {"text_delta": "text", "thinking_delta": "thinking",
                 "signature_delta": "thinking", "input_json_delta": "tool_use"}.get(
                     str(kind), "text"))
            if parts.type in ("thinking", "tool_use"):
                self.after_other_block = True
        # A delta only counts for a block of its own kind (as the SDK reads them).
        if kind == "text_delta" and delta.get("text") and parts.type == "text":
            return self._text(parts, str(delta["text"]))
        if kind == "thinking_delta" and delta.get("thinking") and parts.type == "thinking":
            parts.text.append(str(delta["thinking"]))
            return [StreamThinking(str(delta["thinking"]))]
        if kind == "signature_delta" and parts.type == "thinking":
            # The whole signature comes in one delta; a later one replaces it.
            parts.signature = str(delta.get("signature") or "") or parts.signature
        elif kind == "input_json_delta" and parts.type == "tool_use":
            parts.text.append(str(delta.get("partial_json") or ""))
        return []

    @property
    def has_content(self) -> bool:
        return any(p.text or p.type == "tool_use" for p in self.blocks.values())

    def message(self) -> Message:
        blocks: list[Block] = []
        raw_last: Any = None
        for index in sorted(self.blocks):
            parts = self.blocks[index]
            text = "".join(parts.text)
            if parts.type == "text" and text:
                blocks.append(TextBlock(text))
            elif parts.type == "thinking":
                blocks.append(ThinkingBlock(text, parts.signature))
            elif parts.type == "tool_use":
                raw_last = text if parts.text else parts.input
                parsed, error = parse_tool_arguments(raw_last)
                blocks.append(ToolUseBlock(id=parts.id or new_call_id(), name=parts.name,
                                           input=parsed, arguments_error=error))
        return _cut_last_tool_use(blocks, self.stop_reason, raw_last)

    def raw(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "stop_reason": self.stop_reason,
                "usage": self.usage, "content": [b.to_dict() for b in self.message().blocks]}


class AnthropicProvider(HttpProvider):
    """Messages API at ``{base_url}/v1/messages``. ``max_tokens`` is required by the API:
    the request's value, else ``default_max_tokens``."""

    kind = "anthropic"
    default_capabilities = Capabilities(native_tool_calling=True, vision=True,
                                        prompt_caching=True, streaming=True)
    # The Messages API has no seed, penalties or response_format.
    request_params = frozenset({"max_tokens", "temperature", "top_p", "stop"})

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str = ANTHROPIC_BASE_URL,
        anthropic_version: str = ANTHROPIC_VERSION,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float = DEFAULT_TIMEOUT_S,
        extra_headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        capabilities: dict[str, Any] | None = None,
        http_client: Any = None,
        transport: Any = None,
        name: str = "",
    ) -> None:
        self.anthropic_version = anthropic_version
        self.default_max_tokens = default_max_tokens
        super().__init__(base_url=base_url, api_key=api_key, timeout=timeout,
                         extra_headers=extra_headers, extra_body=extra_body,
                         capabilities=capabilities, http_client=http_client, transport=transport,
                         name=name)

    @property
    def url(self) -> str:
        if self.base_url.endswith("/messages"):
            return self.base_url
        if self.base_url.endswith("/v1"):
            return f"{self.base_url}/messages"
        return f"{self.base_url}/v1/messages"

    def auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self.anthropic_version}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def payload(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        caching = self.capabilities_for(request.model).prompt_caching
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens or self.default_max_tokens,
            "messages": messages_to_anthropic(request.messages),
        }
        system = system_to_anthropic(request.system, request.messages, caching=caching)
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = tools_to_anthropic(request.tools)
        params = request.sampling(self.request_params)
        params.pop("max_tokens", None)
        if "stop" in params:
            params["stop_sequences"] = params.pop("stop")
        body.update(params)  # temperature, top_p, stop_sequences
        if stream:
            body["stream"] = True
        body.update(self.extra_body)
        return body

    async def chat(self, request: ChatRequest) -> ChatResponse:
        data = await self.post_json(self.url, self.payload(request, stream=False), request.model)
        if data.get("type") == "error":
            raise self._event_error(data.get("error"), request.model)
        if not isinstance(data.get("content"), list):
            raise malformed_error("it had no content", provider=self.name, model=request.model)
        stop_reason = data.get("stop_reason")
        message = message_from_anthropic(data["content"],
                                         str(stop_reason) if stop_reason else None)
        usage = Usage.from_anthropic(data.get("usage") if isinstance(data.get("usage"), dict)
                                     else None)
        message.usage = usage
        return ChatResponse(message=message, usage=usage,
                            model=str(data.get("model") or request.model), provider=self.name,
                            stop_reason=data.get("stop_reason"), raw=data)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        state = _StreamState()
        try:
            async with self.open_stream(self.url, self.payload(request, stream=True),
                                        request.model) as response:
                async for event in iter_sse(self.stream_lines(response, request.model)):
                    data = loads_object(event.data)
                    if data is None:
                        continue
                    for item in self._feed(state, data, event.event, request.model):
                        yield item
                    if state.stopped:
                        break
        except ProviderError as exc:
            # An error event or a connection cut mid-answer: the caller may keep what came.
            exc.partial_text = exc.partial_text or state.partial_text
            raise
        # ``message_delta`` carries the stop reason and the final usage; only ``message_stop``
        # follows it, so an answer with a stop reason is whole even if that last event is lost.
        if not (state.stopped or state.stop_reason):
            if state.has_content:
                raise cut_off_error(provider=self.name, model=request.model,
                                    partial_text=state.partial_text)
            raise malformed_error("the stream held no answer", provider=self.name,
                                  model=request.model)
        message = state.message()
        usage = Usage.from_anthropic(state.usage)
        message.usage = usage
        yield StreamDone(ChatResponse(message=message, usage=usage,
                                      model=state.model or request.model, provider=self.name,
                                      stop_reason=state.stop_reason, raw=state.raw()))

    def _feed(self, state: _StreamState, data: dict[str, Any], event: str,
              model: str) -> list[StreamEvent]:
        kind = data.get("type") or event
        index = data.get("index") if isinstance(data.get("index"), int) else 0
        if kind == "message_start":
            message = data.get("message") or {}
            state.model = str(message.get("model") or "")
            state.id = str(message.get("id") or "")
            state.merge_usage(message.get("usage"))
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            return state.start(index, data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            return state.delta(index, data["delta"])
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if isinstance(delta, dict) and delta.get("stop_reason"):
                state.stop_reason = str(delta["stop_reason"])
            state.merge_usage(data.get("usage"))
        elif kind == "message_stop":
            state.stopped = True
        elif kind == "error":
            raise self._event_error(data.get("error"), model)
        return []

    def _event_error(self, error: Any, model: str) -> ProviderError:
        error_type = error.get("type") if isinstance(error, dict) else None
        status = _ERROR_TYPE_STATUS.get(str(error_type), 500)
        return status_error(status, {}, json.dumps({"error": error}), provider=self.name,
                            model=model, secrets=self._secrets)
