"""One model request: hooks, compaction, the request itself, streaming, usage and parsing.

Before each request the budget hook may block the turn or move it to another model, and the
history is compacted when it has grown too large. The request is streamed (text deltas are
reported as they arrive, tool-call markup hidden), cancellable and under the step timeout. A
stream that breaks off and starts over (``StreamRestart``) voids the text streamed so far. A
context overflow is recovered from once by shortening the history; other provider errors end
the turn, keeping the text streamed so far. Tokens are never silently zero: a response whose
server reported no usage, a failed request that had streamed text and an answer that was
restarted are counted by estimate, and flagged so. A successful response is parsed into text
and tool calls by the dispatcher.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass, field

from .. import history as history_ops
from .. import tokenizer
from ..cancel import CancelToken, StepTimedOut, TurnCancelled, guarded
from ..dispatch import ParsedResponse, VisibleTextFilter, select_dispatcher
from ..events import (
    Compacted,
    LlmRequestFinished,
    LlmRequestStarted,
    LlmStreamRestarted,
    Observer,
    TextDelta,
    ToolCallParseIssue,
)
from ..history.shapes import content_text
from ..messages import Message, Role, ToolUseBlock, images_in, without_images
from ..pricing import Usage
from ..providers.base import (
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Provider,
    ProviderError,
    StreamDone,
    StreamRestart,
    StreamText,
    StreamThinking,
)
from ..scrub import scrub_secrets
from ..tools import ToolSpec
from .conversation import Conversation
from .prompt import SystemPrompt
from .types import EndTurn, LlmCall, LlmCallDecision, TurnConfig, TurnHooks, TurnStatus, clip

STEP_TIMEOUT_ERROR = "LLM inference step timed out after {seconds:g}s (step_timeout_s)"
STREAM_INCOMPLETE = "assistant stream ended without a message stop event"
PARSE_EXCERPT_CHARS = 600


# Tokens a chat format adds around each message (role, delimiters), as the history counts them.
MESSAGE_FRAMING_TOKENS = 4


def estimate_request_usage(request: ChatRequest, output: str) -> Usage:
    """Tokens a request and an answer come to, by the runtime's estimate: counted with the
    model family's tokenizer where one is available (``tokenizer``), else the history's
    per-block estimate for the messages and ceil(characters / 4) for the system prompt, tool
    specs and output."""
    specs = json.dumps([t.to_dict() for t in request.tools]) if request.tools else ""
    count = tokenizer.counter_for(request.model)
    if count is None:
        count = tokenizer.approximate_tokens
        prompt = history_ops.estimate_tokens(request.messages)
    else:
        prompt = sum(count(content_text(m)) + MESSAGE_FRAMING_TOKENS for m in request.messages)
    return Usage(input_tokens=prompt + count(request.system_text) + count(specs),
                 output_tokens=count(output))


def _written(message: Message) -> str:
    """What the model wrote, for the estimate of its output: its text and reasoning, and each
    call's name with its arguments as sent (the raw text, when it was not valid JSON, rather
    than the empty arguments it was read as)."""
    parts = []
    for block in message.blocks:
        if isinstance(block, ToolUseBlock) and block.arguments_error:
            parts.append(block.name + block.arguments_error)
        else:
            parts.append(content_text(Message(message.role, [block])))
    return "".join(parts)


def response_id(raw: object) -> str:
    """The provider's id of an answer (OpenAI's ``chatcmpl-…``, Anthropic's ``msg_…``), when
    its payload has one: the trace keeps it, so an answer can be found in the provider's logs."""
    return str(raw.get("id") or "")[:200] if isinstance(raw, dict) else ""


def assistant_message(response: ChatResponse, parsed: ParsedResponse) -> Message:
    """The response as it goes into the history: the calls as parsed (ids assigned, unusable
    arguments stored as ``{}`` so the history stays valid) replace the provider's own."""
    blocks = [b for b in response.message.blocks if not isinstance(b, ToolUseBlock)]
    return Message(Role.ASSISTANT, [*blocks, *parsed.calls], response.usage)


@dataclass(slots=True)
class _Stream:
    parts: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    response: ChatResponse | None = None
    first_token_at: float | None = None
    # The first event of any kind (text, thinking, or the whole answer of tool calls).
    first_chunk_at: float | None = None
    # The estimate of answers that broke off and were started over: billed, never reported.
    voided: Usage = field(default_factory=Usage)

    @property
    def text(self) -> str:
        return "".join(self.parts)


# Estimates count about four characters a token; a model's own tokenizer may count more.
ESTIMATE_MARGIN = 1.1
# How providers name their window in an overflow error: llama.cpp ("exceed context window of
# 4096"), OpenAI and vLLM ("maximum context length is 8192 tokens"), others.
_WINDOW_IN_ERROR = re.compile(
    r"(?i)(?:context window of|maximum context length is|context length is(?: only)?|"
    r"context size(?: is)?|n_ctx(?:_slot)?\s*[=:]?)\s*(\d{3,7})")


def window_from_error(text: str) -> int | None:
    """The context window an overflow error names, if it names one."""
    match = _WINDOW_IN_ERROR.search(text or "")
    return int(match.group(1)) if match else None
# How many times a request over the window is shortened before the turn gives up.
FIT_ATTEMPTS = 6


class ModelStep:
    """Sends the turn's requests and keeps what they cost (``usage``, ``llm_calls``)."""

    def __init__(self, *, provider: Provider, cfg: TurnConfig, specs: list[ToolSpec],
                 tool_names: list[str], conversation: Conversation, prompt: SystemPrompt,
                 observer: Observer, cancel: CancelToken | None, hooks: TurnHooks | None) -> None:
        self.provider = provider
        self.model = cfg.model
        self.cfg = cfg
        self.specs = specs
        self.tool_names = tool_names
        self.known = frozenset(tool_names)
        self.conversation = conversation
        self.prompt = prompt
        self.observer = observer
        self.cancel = cancel
        self.hooks = hooks
        self.usage = Usage()
        self.llm_calls: list[LlmCall] = []
        self.spec_tokens = (tokenizer.approximate_tokens(json.dumps([s.to_dict() for s in specs]))
                            if specs else 0)

    async def request(self, iteration: int, *, with_tools: bool, extra: Message | None = None,
                      failure: tuple[TurnStatus, str, str] | None = None
                      ) -> tuple[ChatResponse, ParsedResponse]:
        """``failure``: the status, message and kind the turn ends with if the provider fails
        (default: failed, with the provider's message)."""
        if self.cancel is not None:
            self.cancel.raise_if_cancelled()
        if self.hooks is not None:
            self.apply_decision(await self.hooks.before_llm_call(iteration, self.usage))
        await self.conversation.maybe_compact()
        await self.fit_window(with_tools=with_tools, extra=extra)
        recovered = False
        while True:
            request = self.build_request(with_tools=with_tools, extra=extra)
            try:
                return await self.call_model(iteration, request, with_tools=with_tools)
            except ProviderError as exc:
                if exc.kind == ErrorKind.CONTEXT_OVERFLOW and not recovered:
                    recovered = True
                    # The provider may say its window (smaller than configured): the request
                    # is fitted to that one, earlier turns left out as needed.
                    learned = self.learn_window(exc)
                    if self.conversation.recover():
                        info = self.conversation.compactions[-1]
                        await self.observer.emit(Compacted(
                            reason="context_overflow",
                            removed_message_count=info.removed_message_count,
                            summary=info.summary))
                        await self.fit_window(with_tools=with_tools, extra=extra)
                        continue
                    if learned:
                        await self.fit_window(with_tools=with_tools, extra=extra)
                        continue
                status, message, kind = failure or (TurnStatus.FAILED, exc.message or str(exc),
                                                     "provider")
                raise EndTurn(status, message, kind, details=exc.trace_details) from exc

    def learn_window(self, error: ProviderError) -> bool:
        """Take the context window an overflow error names, when it is smaller than the one
        configured (or none was): True when it was."""
        found = window_from_error(error.message or str(error))
        current = self.cfg.context_window
        if found is None or (current is not None and found >= current):
            return False
        self.cfg.context_window = found
        self.cfg.answer_reserve = (min(self.cfg.max_tokens, found // 2) if self.cfg.max_tokens
                                   else found // 8)
        return True

    async def fit_window(self, *, with_tools: bool, extra: Message | None) -> None:
        """A request estimated over the model's context window (less the room kept for the
        answer, with a margin for the estimate) is never sent: the history is shortened first
        (``Conversation.shorten``, each time reported as a compaction), and when this turn's
        own messages alone are too long the turn ends saying so."""
        window = self.cfg.context_window
        if not window:
            return
        room = window - self.cfg.answer_reserve
        for attempt in range(FIT_ATTEMPTS + 1):
            estimate = self.estimate_input_tokens(self.build_request(with_tools=with_tools,
                                                                     extra=extra))
            if estimate * ESTIMATE_MARGIN <= room:
                return
            if attempt == FIT_ATTEMPTS or not self.conversation.shorten():
                break
            info = self.conversation.compactions[-1]
            await self.observer.emit(Compacted(
                reason="context_window", removed_message_count=info.removed_message_count,
                summary=info.summary))
        raise EndTurn(
            TurnStatus.FAILED,
            f"This turn no longer fits the model's context window: its request would be about "
            f"{estimate:,} tokens, and {self.model} reads at most {window:,} at once, "
            f"{self.cfg.answer_reserve:,} of them kept for the answer. Start a new conversation, "
            "or ask for less at once.", "context_overflow")

    def apply_decision(self, decision: LlmCallDecision | None) -> None:
        if decision is None:
            return
        if decision.block_reason:
            raise EndTurn(TurnStatus.FAILED, decision.block_reason, "budget")
        if decision.model:
            self.model = decision.model
        if decision.provider is not None and decision.provider is not self.provider:
            self.provider = decision.provider
        if decision.model or decision.provider is not None:
            # Another model may dispatch differently (native tools or not).
            dispatcher = select_dispatcher(self.cfg.dispatcher, self.provider.capabilities_for(self.model))
            if dispatcher.name != self.conversation.dispatcher.name:
                self.prompt.tool_section = dispatcher.system_section(self.specs)
                self.conversation.use_dispatcher(dispatcher)

    def build_request(self, *, with_tools: bool, extra: Message | None) -> ChatRequest:
        conversation = self.conversation
        messages = self.vision_checked(list(conversation.wire))
        if extra is not None:
            messages.append(extra)
        sends_specs = with_tools and self.specs and conversation.dispatcher.sends_tool_specs
        return ChatRequest(
            model=self.model,
            messages=messages,
            system=self.prompt.blocks(conversation.system_messages, with_tools=with_tools),
            tools=self.specs if sends_specs else None,
            temperature=self.cfg.temperature,
            max_tokens=self.cfg.max_tokens,
            **self.cfg.request_params,
        )

    def vision_checked(self, messages: list[Message]) -> list[Message]:
        """Images go to a model that can read them. For one that cannot (ZeroClaw's capability
        check), the images of earlier turns are left out with a sentence saying so, and an image
        in the message being answered ends the turn before any request, saying why."""
        if not images_in(messages):
            return messages
        capabilities = getattr(self.provider, "capabilities_for", None)
        if capabilities is None or capabilities(self.model).vision:
            return messages
        last_user = max((i for i, m in enumerate(messages) if m.role is Role.USER), default=-1)
        current = images_in(messages[last_user:last_user + 1]) if last_user >= 0 else []
        if current:
            raise EndTurn(TurnStatus.FAILED,
                          f"The model {self.model} cannot read images ({len(current)} attached). "
                          "Remove the image, or switch to a model that supports vision.",
                          "capability")
        return [without_images(m) for m in messages]

    def estimate_input_tokens(self, request: ChatRequest) -> int:
        """The request's input by the conversation's running estimate, the system prompt and
        the tool specs: cheap enough for every request, unlike ``estimate_request_usage``."""
        conversation = self.conversation
        extra = request.messages[len(conversation.wire):]
        return (conversation.wire_tokens + history_ops.estimate_tokens(extra)
                + tokenizer.approximate_tokens(request.system_text)
                + (self.spec_tokens if request.tools else 0))

    async def call_model(self, iteration: int, request: ChatRequest, *,
                         with_tools: bool) -> tuple[ChatResponse, ParsedResponse]:
        provider, provider_name = self.provider, _provider_name(self.provider)
        offered = self.tool_names if with_tools else []
        await self.observer.emit(LlmRequestStarted(
            iteration=iteration, provider=provider_name, model=request.model,
            messages_count=len(request.messages), tools_available=list(offered),
            request={**self.conversation.request_trace(request), "stream": self.cfg.stream},
            estimated_input_tokens=self.estimate_input_tokens(request),
            cache_min_tokens=(provider.cache_min_tokens
                              if provider.capabilities_for(request.model).prompt_caching else None)))
        stream = _Stream()
        started = time.perf_counter()
        try:
            response = await guarded(self.consume(provider, request, iteration, stream),
                                     cancel=self.cancel, limit_s=self.cfg.step_timeout_s)
        except TurnCancelled:
            await self.model_failed(iteration, request, provider_name, started, stream, "cancelled")
            self.keep_partial(stream)
            raise
        except StepTimedOut:
            message = STEP_TIMEOUT_ERROR.format(seconds=self.cfg.step_timeout_s or 0)
            await self.model_failed(iteration, request, provider_name, started, stream, message)
            self.keep_partial(stream)
            raise EndTurn(TurnStatus.TIMED_OUT, message, "timeout") from None
        except ProviderError as exc:
            await self.model_failed(iteration, request, provider_name, started, stream, str(exc),
                                    details=exc.trace_details)
            if exc.kind != ErrorKind.CONTEXT_OVERFLOW:
                self.keep_partial(stream)
            raise
        except Exception as exc:  # noqa: BLE001 - a provider bug must end the turn cleanly
            await self.model_failed(iteration, request, provider_name, started, stream, str(exc))
            raise ProviderError(f"{type(exc).__name__}: {exc}", retryable=False,
                                kind=ErrorKind.MALFORMED, provider=provider_name) from exc

        latency_ms = (time.perf_counter() - started) * 1000
        self.settle_usage(request, response, stream)
        if with_tools:
            parsed = self.conversation.dispatcher.parse_response(
                response, new_id=self.conversation.new_call_id, known_tools=self.known,
                earlier=self.conversation.calls_by_id())
        else:  # the summary request offered no tools; whatever it tries to call is ignored
            parsed = ParsedResponse(text=response.text)
        usage = response.usage
        self.usage = self.usage + usage
        call = LlmCall(iteration, provider_name, response.model or request.model, usage,
                       latency_ms, True)
        self.llm_calls.append(call)
        first_ms = ((stream.first_token_at - started) * 1000) if stream.first_token_at else None
        chunk_ms = ((stream.first_chunk_at - started) * 1000) if stream.first_chunk_at else None
        await self.observer.emit(LlmRequestFinished(
            iteration=iteration, provider=provider_name, model=call.model, success=True,
            usage=usage, usage_estimated=response.usage_estimated, latency_ms=latency_ms,
            first_token_ms=first_ms, first_chunk_ms=chunk_ms, stop_reason=response.stop_reason,
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.input} for c in parsed.calls],
            response={"message": response.message.to_dict(), "stop_reason": response.stop_reason,
                      "model": response.model, "id": response_id(response.raw)}))
        if parsed.parse_issue:
            await self.observer.emit(ToolCallParseIssue(
                iteration=iteration, issue=parsed.parse_issue,
                excerpt=clip(scrub_secrets(response.text), PARSE_EXCERPT_CHARS)))
        if self.hooks is not None:
            await self.hooks.after_llm_call(call)
        self.prompt.notices = []
        return response, parsed

    async def consume(self, provider: Provider, request: ChatRequest, iteration: int,
                      stream: _Stream) -> ChatResponse:
        if not self.cfg.stream:
            return await provider.chat(request)
        visible = VisibleTextFilter()
        async with contextlib.aclosing(provider.stream(request)) as events:
            async for event in events:
                if stream.first_chunk_at is None:
                    stream.first_chunk_at = time.perf_counter()
                if isinstance(event, StreamText):
                    if stream.first_token_at is None:
                        stream.first_token_at = time.perf_counter()
                    stream.parts.append(event.text)
                    shown = visible.feed(event.text)
                    if shown:
                        await self.observer.emit(TextDelta(iteration=iteration, text=shown))
                elif isinstance(event, StreamThinking):
                    stream.thinking.append(event.text)
                elif isinstance(event, StreamRestart):
                    await self.restarted(iteration, request, stream, event)
                    visible = VisibleTextFilter()
                elif isinstance(event, StreamDone):
                    stream.response = event.response
        tail = visible.flush()
        if tail:
            await self.observer.emit(TextDelta(iteration=iteration, text=tail))
        if stream.response is None:
            raise ProviderError(STREAM_INCOMPLETE, retryable=True, kind=ErrorKind.MALFORMED,
                                provider=_provider_name(provider), model=request.model)
        return stream.response

    async def restarted(self, iteration: int, request: ChatRequest, stream: _Stream,
                        event: StreamRestart) -> None:
        """The answer broke off and starts over: what was streamed is void (but was billed)."""
        partial = event.partial_text or stream.text
        if partial:
            stream.voided = stream.voided + estimate_request_usage(request, partial)
        stream.parts.clear()
        stream.thinking.clear()
        await self.observer.emit(LlmStreamRestarted(
            iteration=iteration, reason=event.reason, partial_text=partial,
            provider=event.provider, model=event.model, next_provider=event.next_provider,
            next_model=event.next_model))

    def settle_usage(self, request: ChatRequest, response: ChatResponse, stream: _Stream) -> None:
        """Never a silent zero: a server that reported no usage for an answer with content is
        counted by estimate, and answers voided by a restart are added to it; either way
        ``usage_estimated`` says so."""
        if response.usage.is_zero():
            # An empty answer too: the request was read, its input counts.
            output = _written(response.message) or stream.text
            response.usage = estimate_request_usage(request, output)
            response.usage_estimated = True
        if not stream.voided.is_zero():
            response.usage = response.usage + stream.voided
            response.usage_estimated = True

    async def model_failed(self, iteration: int, request: ChatRequest, provider_name: str,
                           started: float, stream: _Stream, error: str, *,
                           details: str = "") -> None:
        latency_ms = (time.perf_counter() - started) * 1000
        # A stream that already produced text was read and partly answered: the provider bills
        # it though it never reports usage. Count an estimate rather than nothing.
        usage = estimate_request_usage(request, stream.text) if stream.parts else Usage()
        usage = usage + stream.voided
        self.usage = self.usage + usage
        call = LlmCall(iteration, provider_name, request.model, usage, latency_ms, False,
                       scrub_secrets(error))
        self.llm_calls.append(call)
        response: dict[str, str] = {"partial_text": stream.text} if stream.parts else {}
        if details:
            response["attempts"] = scrub_secrets(details)
        await self.observer.emit(LlmRequestFinished(
            iteration=iteration, provider=provider_name, model=request.model, success=False,
            usage=usage, usage_estimated=not usage.is_zero(),
            latency_ms=latency_ms, error=call.error, response=response))
        if self.hooks is not None:
            await self.hooks.after_llm_call(call)

    def keep_partial(self, stream: _Stream) -> None:
        """Text streamed before a cancel, a timeout or a provider error stays in the
        conversation (and so in the chat)."""
        if stream.text:
            self.conversation.append(Message.assistant(stream.text))


def _provider_name(provider: Provider) -> str:
    return getattr(provider, "name", "") or getattr(provider, "kind", "") or type(provider).__name__
