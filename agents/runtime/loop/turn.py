"""The tool-call loop: ``run_turn`` answers one user message, running tools as the model asks.

One iteration: budget hook, compaction check, one model request (streamed, cancellable, under a
step timeout), then the requested tools -- deduplicated, approved, run in parallel when allowed,
results kept in call order, every output scrubbed of credentials and truncated -- then loop
detection and a trajectory state. The turn ends with a final answer, on cancellation, on a
failure, or after ``max_tool_iterations`` with one last request, without tools, for a summary.

Everything that happens is reported to the ``Observer``; nothing is persisted here. The result
carries the messages to store (the user's raw text; the time stamp is only sent to the model)
and the full history for the next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .. import history as history_ops
from ..builtin import resolve_timezone
from ..cancel import CancelToken, StepTimedOut, TurnCancelled, guarded
from ..dispatch import ParsedResponse, ToolDispatcher, VisibleTextFilter, select_dispatcher
from ..events import (
    Compacted,
    Event,
    FinalAnswer,
    LlmRequestFinished,
    LlmRequestStarted,
    LoopDetected,
    NullObserver,
    Observer,
    TextDelta,
    ToolCallParseIssue,
    ToolFinished,
    ToolStarted,
    TrajectoryStateRecorded,
    TurnError,
)
from ..messages import Message, Role, ToolResultBlock, ToolUseBlock, close_dangling_tool_uses
from ..parsing import strip_think_tags
from ..pricing import Usage
from ..providers.base import (
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Provider,
    ProviderError,
    StreamDone,
    StreamText,
    StreamThinking,
    SystemBlock,
)
from ..sanitize import sanitize_response
from ..scrub import scrub_credentials
from ..tools import Tool, ToolError, ToolResult
from ..trajectory import (
    ObservedCall,
    TrajectoryState,
    build_trajectory_state,
    changed_fields,
    trajectory_state_prompt_block,
)
from .approvals import DENIED_OUTPUT, Approver, ask_approval
from .detector import LoopDetector, call_signature
from .types import (
    CANCELLED_OUTPUT,
    INTERRUPTED_OUTPUT,
    CompactionInfo,
    LlmCall,
    LlmCallDecision,
    TurnConfig,
    TurnHooks,
    TurnResult,
    TurnStatus,
    clip,
)

DEFAULT_MAX_TOOL_ITERATIONS = 10
DUPLICATE_OUTPUT = "Skipped duplicate tool call '{name}' with identical arguments in this turn."
EXHAUSTION_PROMPT = (
    "You have reached the maximum number of tool iterations. Please provide your best answer "
    "based on the work completed so far. Summarize what you accomplished and what remains to be "
    "done."
)
EXHAUSTED_ERROR = "Agent exceeded maximum tool iterations ({max})"
STEP_TIMEOUT_ERROR = "LLM inference step timed out after {seconds:g}s (step_timeout_s)"
LOOP_ABORT_ERROR = "Agent loop aborted by loop detector: {message}"
STREAM_INCOMPLETE = "assistant stream ended without a message stop event"
# Tools that change what other calls of the same response may do; they never run in parallel.
SERIAL_TOOLS = frozenset({"tool_search"})
PREVIEW_CHARS = 200
PARSE_EXCERPT_CHARS = 600
_CALL_ID = re.compile(r"^call_(\d+)$")
# The name the loop logged under before it became a package; log filters know it.
logger = logging.getLogger("agents.runtime.loop")


def estimate_request_usage(request: ChatRequest, output: str) -> Usage:
    """Tokens a request and a partial answer come to, by the runtime's estimate (the history's
    per-block estimate, ceil(characters / 4) for the system prompt, tool specs and output)."""
    specs = json.dumps([t.to_dict() for t in request.tools]) if request.tools else ""
    prompt = history_ops.estimate_tokens(request.messages)
    fixed = -(-len(request.system_text) // 4) + -(-len(specs) // 4)
    return Usage(input_tokens=prompt + fixed, output_tokens=-(-len(output) // 4))


def _trim(messages: list[Message], cap: int) -> list[Message]:
    """At most ``cap`` messages besides the leading system ones (0: no cap); a tool result is
    never left at the head without its call."""
    return history_ops.trim_history(messages, cap) if cap > 0 else messages


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _provider_name(provider: Provider) -> str:
    return getattr(provider, "name", "") or getattr(provider, "kind", "") or type(provider).__name__


@dataclass(slots=True)
class _Stream:
    parts: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    response: ChatResponse | None = None
    first_token_at: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclass(slots=True)
class _Outcome:
    output: str
    success: bool
    error: str | None = None


class _StopTurn(Exception):  # noqa: N818 - control flow, carries the result
    def __init__(self, result: TurnResult) -> None:
        super().__init__(result.status)
        self.result = result


class _Turn:
    def __init__(self, *, provider: Provider, config: TurnConfig, history: list[Message],
                 user_message: str, tools: Sequence[Tool], observer: Observer,
                 cancel: CancelToken | None, approver: Approver | None,
                 hooks: TurnHooks | None, clock: Callable[[], datetime]) -> None:
        self.provider = provider
        self.model = config.model
        self.cfg = config
        self.observer = observer
        self.cancel = cancel
        self.approver = approver
        self.hooks = hooks
        self.user_text = user_message
        self.tools = {t.name: t for t in tools}
        self.specs = [t.spec() for t in tools]
        self.tool_names = [s.name for s in self.specs]
        self.known = frozenset(self.tool_names)
        self.dispatcher: ToolDispatcher = select_dispatcher(config.dispatcher, provider.capabilities_for(config.model))
        self.tool_section = self.dispatcher.system_section(self.specs)

        zone = resolve_timezone(config.timezone) or resolve_timezone("UTC")
        now = clock()
        self.now = (now if now.tzinfo else now.replace(tzinfo=UTC)).astimezone(zone)
        self.zone_key = getattr(zone, "key", "UTC")

        self.history: list[Message] = list(history)
        self.user = Message.user(user_message)
        self.stamped = Message.user(f"[{self.now:%Y-%m-%d %H:%M:%S %Z}] {user_message}")
        self.new_messages: list[Message] = []
        self.wire: list[Message] = []
        self.system_messages: list[str] = []
        self.sent_messages = 0  # how many wire messages the last request's trace already holds
        self.tokens = 0

        self.iteration = 0
        self.usage = Usage()
        self.llm_calls: list[LlmCall] = []
        self.states: list[TrajectoryState] = []
        self.state: TrajectoryState | None = None
        self.compactions: list[CompactionInfo] = []
        self.notices: list[str] = []
        self.detector = LoopDetector() if config.loop_detection else None
        self.started: set[str] = set()
        self.finished: dict[str, ToolResultBlock] = {}
        self.invalid_arguments: dict[str, str] = {}
        self.next_call = 0
        self.dynamic = SystemBlock(self._dynamic_text())
        self.state_block: SystemBlock | None = None
        self.max_iterations = config.max_tool_iterations or DEFAULT_MAX_TOOL_ITERATIONS

    # -- history and wire ------------------------------------------------------------------------
    def prepare(self) -> None:
        close_dangling_tool_uses(self.history, INTERRUPTED_OUTPUT)
        highest = 0
        for message in self.history:
            for use in message.tool_uses:
                match = _CALL_ID.match(use.id)
                if match:
                    highest = max(highest, int(match.group(1)))
        self.next_call = highest
        self.history.append(self.user)
        self.new_messages.append(self.user)
        self.history = _trim(self.history, self.cfg.history_max_messages)
        self.tokens = history_ops.estimate_tokens(self.history)
        self.rebuild_wire()

    def new_call_id(self) -> str:
        self.next_call += 1
        return f"call_{self.next_call}"

    def rebuild_wire(self) -> None:
        start = 0
        while start < len(self.history) and self.history[start].role is Role.SYSTEM:
            start += 1
        self.system_messages = [m.text for m in self.history[:start] if m.text]
        to_wire = self.dispatcher.to_wire
        self.wire = [self.stamped if m is self.user else to_wire(m) for m in self.history[start:]]
        self.sent_messages = 0

    def append(self, message: Message) -> None:
        self.history.append(message)
        self.new_messages.append(message)
        self.wire.append(self.dispatcher.to_wire(message))
        self.tokens += history_ops.estimate_tokens([message])

    async def emit(self, event: Event) -> None:
        await self.observer.emit(event)

    # -- system prompt -----------------------------------------------------------------------------
    def _dynamic_text(self) -> str:
        parts = [f"## Current Date & Time\n\n{self.now:%Y-%m-%d %H:%M:%S %Z} ({self.now:%A}), "
                 f"time zone {self.zone_key}"]
        if self.cfg.memory_context.strip():
            parts.append(self.cfg.memory_context.strip())
        previous = self.cfg.previous_trajectory_state
        if previous is not None:
            if isinstance(previous, dict):
                previous = TrajectoryState.from_dict(previous)
            parts.append(trajectory_state_prompt_block(
                previous, title="Trajectory state at the end of the previous turn"))
        return "\n\n".join(parts)

    def system_blocks(self, *, with_tools: bool) -> list[SystemBlock]:
        blocks: list[SystemBlock] = []
        if self.cfg.system_prompt:
            blocks.append(SystemBlock(self.cfg.system_prompt, cacheable=True))
        if with_tools and self.tool_section:
            blocks.append(SystemBlock(self.tool_section, cacheable=True))
        blocks.extend(SystemBlock(text) for text in self.system_messages)
        blocks.append(self.dynamic)
        if self.state_block is not None:
            blocks.append(self.state_block)
        blocks.extend(SystemBlock(notice) for notice in self.notices)
        return blocks

    # -- the turn ------------------------------------------------------------------------------------
    async def run(self) -> TurnResult:
        try:
            self.prepare()
            for iteration in range(1, self.max_iterations + 1):
                self.iteration = iteration
                response, parsed = await self.llm_step(iteration, with_tools=True)
                assistant = self.assistant_message(response, parsed)
                self.append(assistant)
                if not parsed.calls:
                    return await self.complete(response.text, TurnStatus.COMPLETED)
                await self.tool_phase(iteration, parsed)
            return await self.exhausted()
        except _StopTurn as stop:
            return stop.result
        except TurnCancelled as exc:
            return await self.stop(TurnStatus.CANCELLED, exc.reason, "cancelled")
        except Exception as exc:
            logger.exception("turn failed unexpectedly")
            return await self.stop(TurnStatus.FAILED, f"Internal error: {exc}", "internal")

    async def llm_step(self, iteration: int, *, with_tools: bool, extra: Message | None = None,
                       failure: tuple[TurnStatus, str, str] | None = None
                       ) -> tuple[ChatResponse, ParsedResponse]:
        if self.cancel is not None:
            self.cancel.raise_if_cancelled()
        if self.hooks is not None:
            await self.apply_decision(await self.hooks.before_llm_call(iteration, self.usage))
        await self.maybe_compact()
        recovered = False
        while True:
            request = self.build_request(with_tools=with_tools, extra=extra)
            try:
                return await self.call_model(iteration, request, with_tools=with_tools)
            except ProviderError as exc:
                if exc.kind == ErrorKind.CONTEXT_OVERFLOW and not recovered and self.recover():
                    recovered = True
                    info = self.compactions[-1]
                    await self.emit(Compacted(reason="context_overflow",
                                              removed_message_count=info.removed_message_count,
                                              summary=info.summary))
                    continue
                status, message, kind = failure or (TurnStatus.FAILED, exc.message or str(exc),
                                                     "provider")
                raise _StopTurn(await self.stop(status, message, kind)) from exc

    async def apply_decision(self, decision: LlmCallDecision | None) -> None:
        if decision is None:
            return
        if decision.block_reason:
            raise _StopTurn(await self.stop(TurnStatus.FAILED, decision.block_reason, "budget"))
        if decision.model:
            self.model = decision.model
        if decision.provider is not None and decision.provider is not self.provider:
            self.provider = decision.provider
        if decision.model or decision.provider is not None:
            # Another model may dispatch differently (native tools or not).
            dispatcher = select_dispatcher(self.cfg.dispatcher, self.provider.capabilities_for(self.model))
            if dispatcher.name != self.dispatcher.name:
                self.dispatcher = dispatcher
                self.tool_section = dispatcher.system_section(self.specs)
                self.rebuild_wire()

    def build_request(self, *, with_tools: bool, extra: Message | None) -> ChatRequest:
        messages = list(self.wire)
        if extra is not None:
            messages.append(extra)
        tools = self.specs if (with_tools and self.specs and self.dispatcher.sends_tool_specs) else None
        return ChatRequest(
            model=self.model,
            messages=messages,
            system=self.system_blocks(with_tools=with_tools),
            tools=tools,
            temperature=self.cfg.temperature,
            max_tokens=self.cfg.max_tokens,
        )

    def request_trace(self, request: ChatRequest) -> dict[str, Any]:
        """The request for the trace. Messages already in the previous request's trace are not
        repeated: ``messages`` holds the wire messages from ``message_offset`` on."""
        offset = self.sent_messages if self.sent_messages <= len(self.wire) else 0
        trace: dict[str, Any] = {
            "model": request.model,
            "dispatcher": self.dispatcher.name,
            "system": [{"text": b.text, "cacheable": b.cacheable} for b in request.system],
            "tools": [s.name for s in request.tools or []],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "message_offset": offset,
            "messages": [m.to_dict() for m in request.messages[offset:]],
        }
        if offset == 0 and request.tools:
            trace["tool_specs"] = [s.to_dict() for s in request.tools]
        self.sent_messages = len(self.wire)
        return trace

    async def call_model(self, iteration: int, request: ChatRequest, *,
                         with_tools: bool) -> tuple[ChatResponse, ParsedResponse]:
        provider, provider_name = self.provider, _provider_name(self.provider)
        offered = self.tool_names if with_tools else []
        await self.emit(LlmRequestStarted(
            iteration=iteration, provider=provider_name, model=request.model,
            messages_count=len(request.messages), tools_available=list(offered),
            request=self.request_trace(request)))
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
            raise _StopTurn(await self.stop(TurnStatus.TIMED_OUT, message, "timeout")) from None
        except ProviderError as exc:
            await self.model_failed(iteration, request, provider_name, started, stream, str(exc))
            raise
        except Exception as exc:  # noqa: BLE001 - a provider bug must end the turn cleanly
            await self.model_failed(iteration, request, provider_name, started, stream, str(exc))
            raise ProviderError(f"{type(exc).__name__}: {exc}", retryable=False,
                                kind=ErrorKind.MALFORMED, provider=provider_name) from exc

        latency_ms = (time.perf_counter() - started) * 1000
        if with_tools:
            parsed = self.dispatcher.parse_response(response, new_id=self.new_call_id,
                                                    known_tools=self.known)
        else:  # the summary request offered no tools; whatever it tries to call is ignored
            parsed = ParsedResponse(text=response.text)
        usage = response.usage
        self.usage = self.usage + usage
        call = LlmCall(iteration, provider_name, response.model or request.model, usage,
                       latency_ms, True)
        self.llm_calls.append(call)
        first_ms = ((stream.first_token_at - started) * 1000) if stream.first_token_at else None
        await self.emit(LlmRequestFinished(
            iteration=iteration, provider=provider_name, model=call.model, success=True,
            usage=usage, latency_ms=latency_ms, first_token_ms=first_ms,
            stop_reason=response.stop_reason,
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.input} for c in parsed.calls],
            response={"message": response.message.to_dict(), "stop_reason": response.stop_reason,
                      "model": response.model}))
        if parsed.parse_issue:
            await self.emit(ToolCallParseIssue(
                iteration=iteration, issue=parsed.parse_issue,
                excerpt=clip(scrub_credentials(response.text), PARSE_EXCERPT_CHARS)))
        if self.hooks is not None:
            await self.hooks.after_llm_call(call)
        self.notices = []
        return response, parsed

    async def consume(self, provider: Provider, request: ChatRequest, iteration: int,
                      stream: _Stream) -> ChatResponse:
        if not self.cfg.stream:
            return await provider.chat(request)
        visible = VisibleTextFilter()
        async with contextlib.aclosing(provider.stream(request)) as events:
            async for event in events:
                if isinstance(event, StreamText):
                    if stream.first_token_at is None:
                        stream.first_token_at = time.perf_counter()
                    stream.parts.append(event.text)
                    shown = visible.feed(event.text)
                    if shown:
                        await self.emit(TextDelta(iteration=iteration, text=shown))
                elif isinstance(event, StreamThinking):
                    stream.thinking.append(event.text)
                elif isinstance(event, StreamDone):
                    stream.response = event.response
        tail = visible.flush()
        if tail:
            await self.emit(TextDelta(iteration=iteration, text=tail))
        if stream.response is None:
            raise ProviderError(STREAM_INCOMPLETE, retryable=True, kind=ErrorKind.MALFORMED,
                                provider=_provider_name(provider), model=request.model)
        return stream.response

    async def model_failed(self, iteration: int, request: ChatRequest, provider_name: str,
                           started: float, stream: _Stream, error: str) -> None:
        latency_ms = (time.perf_counter() - started) * 1000
        # A stream that already produced text was read and partly answered: the provider bills
        # it though it never reports usage. Count an estimate rather than nothing.
        usage = estimate_request_usage(request, stream.text) if stream.parts else Usage()
        self.usage = self.usage + usage
        call = LlmCall(iteration, provider_name, request.model, usage, latency_ms, False,
                       scrub_credentials(error))
        self.llm_calls.append(call)
        await self.emit(LlmRequestFinished(
            iteration=iteration, provider=provider_name, model=request.model, success=False,
            usage=usage, usage_estimated=bool(stream.parts),
            latency_ms=latency_ms, error=call.error,
            response={"partial_text": stream.text} if stream.parts else {}))
        if self.hooks is not None:
            await self.hooks.after_llm_call(call)

    def keep_partial(self, stream: _Stream) -> None:
        """Text streamed before a cancel or timeout stays in the conversation."""
        if stream.text:
            self.append(Message.assistant(stream.text))

    def assistant_message(self, response: ChatResponse, parsed: ParsedResponse) -> Message:
        # Unusable arguments were stored as {} (so the history stays valid); the tool result
        # tells the model what was wrong with what it sent.
        self.invalid_arguments.update(parsed.argument_errors)
        blocks = [b for b in response.message.blocks if not isinstance(b, ToolUseBlock)]
        return Message(Role.ASSISTANT, [*blocks, *parsed.calls], response.usage)

    # -- tools ---------------------------------------------------------------------------------------
    async def tool_phase(self, iteration: int, parsed: ParsedResponse) -> None:
        calls = parsed.calls
        results: list[ToolResultBlock | None] = [None] * len(calls)
        executed: list[int] = []
        seen: set[tuple[str, str]] = set()
        # Duplicates are skipped before any approval, so nobody is asked twice for one call.
        for index, call in enumerate(calls):
            signature = call_signature(call)
            if signature in seen and call.name not in self.cfg.dedup_exempt_tools:
                results[index] = await self.finish_call(
                    iteration, call, _Outcome(DUPLICATE_OUTPUT.format(name=call.name), False), 0.0)
                continue
            seen.add(signature)
            executed.append(index)

        cancelled: TurnCancelled | None = None
        try:
            if self.run_in_parallel([calls[i] for i in executed]):
                outcomes = await asyncio.gather(
                    *(self.handle_call(iteration, calls[i]) for i in executed),
                    return_exceptions=True)
                for index, outcome in zip(executed, outcomes, strict=True):
                    if isinstance(outcome, TurnCancelled):
                        cancelled = outcome
                    elif isinstance(outcome, BaseException):
                        raise outcome
                    else:
                        results[index] = outcome
            else:
                for index in executed:
                    results[index] = await self.handle_call(iteration, calls[index])
        except TurnCancelled as exc:
            cancelled = exc

        if cancelled is not None:
            for index, call in enumerate(calls):
                if results[index] is None:
                    results[index] = (self.finished.get(call.id)
                                      or await self.finish_cancelled(iteration, call))
            self.append(Message.tool_results([r for r in results if r is not None]))
            raise cancelled

        final = [r for r in results if r is not None]
        verdicts = self.detect_loops(calls, final, executed)
        self.append(Message.tool_results(final))
        for level, message, tool in verdicts:
            await self.emit(LoopDetected(iteration=iteration, level=level, message=message, tool=tool))
        if self.cfg.trajectory_states:
            await self.record_state(iteration, parsed, final)
        breaker = next((message for level, message, _ in verdicts if level == "break"), None)
        if breaker is not None:
            raise _StopTurn(await self.stop(TurnStatus.FAILED,
                                            LOOP_ABORT_ERROR.format(message=breaker), "loop_detected"))

    def run_in_parallel(self, calls: list[ToolUseBlock]) -> bool:
        if not self.cfg.parallel_tools or len(calls) < 2:
            return False
        for call in calls:
            tool = self.tools.get(call.name)
            if call.name in SERIAL_TOOLS or (tool is not None and tool.requires_approval):
                return False
        return True

    async def handle_call(self, iteration: int, call: ToolUseBlock) -> ToolResultBlock:
        arguments = call.input
        self.started.add(call.id)
        await self.emit(ToolStarted(iteration=iteration, call_id=call.id, name=call.name,
                                    arguments=arguments))
        started = time.perf_counter()
        try:
            outcome = await self.run_call(iteration, call)
        except TurnCancelled:
            await self.finish_call(iteration, call, _Outcome(CANCELLED_OUTPUT, False, "cancelled"),
                                   time.perf_counter() - started)
            raise
        return await self.finish_call(iteration, call, outcome, time.perf_counter() - started)

    async def run_call(self, iteration: int, call: ToolUseBlock) -> _Outcome:
        tool = self.tools.get(call.name)
        if tool is None:
            return _Outcome(f"Unknown tool: {call.name}", False, f"Unknown tool: {call.name}")
        problem = self.argument_problem(tool, call)
        if problem is not None:
            return _Outcome(f"Error: {problem}", False, problem)
        if tool.requires_approval and not await ask_approval(
                self.approver, call, iteration, timeout_s=self.cfg.approval_timeout_s,
                cancel=self.cancel, observer=self.observer):
            return _Outcome(DENIED_OUTPUT, False, DENIED_OUTPUT)
        return await self.execute(tool, call)

    def argument_problem(self, tool: Tool, call: ToolUseBlock) -> str | None:
        if call.id in self.invalid_arguments:
            return (f"Invalid arguments for tool '{call.name}': {self.invalid_arguments[call.id]} "
                    "Call the tool again with an object of named arguments.")
        required = tool.parameters.get("required") if isinstance(tool.parameters, dict) else None
        if isinstance(required, list):
            missing = [name for name in required if isinstance(name, str) and name not in call.input]
            if missing:
                return (f"Missing required argument(s) for tool '{call.name}': "
                        f"{', '.join(missing)}.")
        return None

    async def execute(self, tool: Tool, call: ToolUseBlock) -> _Outcome:
        try:
            result = await guarded(tool.execute(call.input), cancel=self.cancel,
                                   limit_s=self.cfg.tool_timeout_s)
        except TurnCancelled:
            raise
        except StepTimedOut:
            reason = f"tool '{call.name}' timed out after {self.cfg.tool_timeout_s or 0:g}s"
            return _Outcome(f"Error: {reason}", False, reason)
        except ToolError as exc:
            return _Outcome(f"Error: {exc}", False, str(exc))
        except Exception as exc:  # noqa: BLE001 - a tool bug becomes a result the model reads
            return _Outcome(f"Error executing {call.name}: {exc}", False, str(exc) or type(exc).__name__)
        if not isinstance(result, ToolResult):
            return _Outcome(str(result), True)
        if result.success:
            return _Outcome(result.output, True)
        reason = result.error or result.output or "the tool reported a failure"
        return _Outcome(f"Error: {reason}", False, reason)

    async def finish_call(self, iteration: int, call: ToolUseBlock, outcome: _Outcome,
                          seconds: float) -> ToolResultBlock:
        # Every output, failures included, is scrubbed before it reaches history or an event.
        output = history_ops.truncate_tool_result(scrub_credentials(outcome.output),
                                                  self.cfg.max_tool_output_chars)
        error = scrub_credentials(outcome.error) if outcome.error else None
        if call.id not in self.started:
            self.started.add(call.id)
            await self.emit(ToolStarted(iteration=iteration, call_id=call.id, name=call.name,
                                        arguments=call.input))
        await self.emit(ToolFinished(
            iteration=iteration, call_id=call.id, name=call.name, arguments=call.input,
            success=outcome.success, output=output, duration_ms=seconds * 1000, error=error,
            output_preview=clip(output, PREVIEW_CHARS)))
        block = ToolResultBlock(call.id, output, not outcome.success, call.name)
        self.finished[call.id] = block
        return block

    async def finish_cancelled(self, iteration: int, call: ToolUseBlock) -> ToolResultBlock:
        return await self.finish_call(iteration, call, _Outcome(CANCELLED_OUTPUT, False, "cancelled"), 0.0)

    def detect_loops(self, calls: list[ToolUseBlock], results: list[ToolResultBlock],
                     executed: list[int]) -> list[tuple[str, str, str]]:
        """Warnings become a notice in the next request's system prompt; a block replaces the
        call's output; the caller ends the turn on a break."""
        if self.detector is None:
            return []
        verdicts = []
        for index in executed:
            call, result = calls[index], results[index]
            verdict = self.detector.record(call.name, call.input, result.output)
            if verdict is None:
                continue
            level, message = verdict
            verdicts.append((level, message, call.name))
            if level == "warning":
                self.notices.append(f"[Loop Detection] {message}")
            elif level == "block":
                results[index] = ToolResultBlock(result.tool_use_id,
                                                 f"[Loop Detection — BLOCKED] {message}", True,
                                                 result.name)
        return verdicts

    async def record_state(self, iteration: int, parsed: ParsedResponse,
                           results: list[ToolResultBlock]) -> None:
        observed = [ObservedCall(c.id, c.name, c.input, r.output, not r.is_error)
                    for c, r in zip(parsed.calls, results, strict=True)]
        text = strip_think_tags(parsed.text) if "<think" in parsed.text else parsed.text
        state = build_trajectory_state(iteration=iteration, objective=self.user_text,
                                       assistant_text=text,
                                       calls=observed, previous=self.state)
        changed = changed_fields(state, self.state)
        self.state = state
        self.states.append(state)
        if self.cfg.inject_trajectory_state:
            self.state_block = SystemBlock(trajectory_state_prompt_block(state))
        await self.emit(TrajectoryStateRecorded(iteration=iteration, state=state.to_dict(),
                                                changed=changed))

    # -- history size --------------------------------------------------------------------------------
    async def maybe_compact(self) -> None:
        settings = self.cfg.compaction
        # The running estimate only grows by what this turn appended; the exact check runs
        # only once it crosses the threshold.
        if not settings.enabled or self.tokens < settings.max_estimated_tokens:
            return
        if not history_ops.should_compact(self.history, preserve_recent=settings.preserve_recent,
                                          max_estimated_tokens=settings.max_estimated_tokens):
            return
        outcome = history_ops.compact(self.history, preserve_recent=settings.preserve_recent,
                                      max_estimated_tokens=settings.max_estimated_tokens)
        if outcome.removed_message_count <= 0:
            return
        self.history = list(outcome.messages)
        self.after_history_change()
        self.compactions.append(CompactionInfo("threshold", outcome.removed_message_count,
                                               outcome.summary))
        await self.emit(Compacted(reason="threshold",
                                  removed_message_count=outcome.removed_message_count,
                                  summary=outcome.summary))

    def recover(self) -> bool:
        """After a context-overflow error: shorten old tool results, else compact, else drop
        the oldest third (``history.recover_context``, in place)."""
        outcome = history_ops.recover_context(self.history)
        if not outcome:
            return False
        self.after_history_change()
        self.compactions.append(CompactionInfo("context_overflow", outcome.removed_message_count,
                                               outcome.summary))
        return True

    def after_history_change(self) -> None:
        close_dangling_tool_uses(self.history, INTERRUPTED_OUTPUT)
        self.tokens = history_ops.estimate_tokens(self.history)
        self.rebuild_wire()

    # -- endings -------------------------------------------------------------------------------------
    def display(self, raw: str) -> str:
        return sanitize_response(raw, self.tool_names)

    async def complete(self, raw: str, status: TurnStatus, error: str | None = None) -> TurnResult:
        text = self.display(raw)
        await self.emit(FinalAnswer(text=text, iterations=self.iteration, usage=self.usage))
        return self.result(status, text=text, raw=raw, error=error)

    async def exhausted(self) -> TurnResult:
        limit = self.max_iterations
        self.iteration = limit + 1
        message = EXHAUSTED_ERROR.format(max=limit)
        response, _ = await self.llm_step(
            self.iteration, with_tools=False, extra=Message.user(EXHAUSTION_PROMPT),
            failure=(TurnStatus.MAX_ITERATIONS, message, "max_iterations"))
        if response.text.strip():
            blocks = [b for b in response.message.blocks if not isinstance(b, ToolUseBlock)]
            self.append(Message(Role.ASSISTANT, blocks, response.usage))
            return await self.complete(response.text, TurnStatus.MAX_ITERATIONS)
        return await self.stop(TurnStatus.MAX_ITERATIONS, message, "max_iterations")

    async def stop(self, status: TurnStatus, message: str, kind: str) -> TurnResult:
        # Providers reject a tool call without a result: answer any left open, in the history
        # for the next turn and in the messages the caller stores.
        synthetic = CANCELLED_OUTPUT if status is TurnStatus.CANCELLED else INTERRUPTED_OUTPUT
        close_dangling_tool_uses(self.history, synthetic)
        close_dangling_tool_uses(self.new_messages, synthetic)
        message = scrub_credentials(message)  # provider errors may quote a key
        await self.emit(TurnError(message=message, error_kind=kind, iteration=self.iteration))
        partial = self.new_messages[-1] if len(self.new_messages) > 1 else None
        raw = partial.text if partial is not None and partial.role is Role.ASSISTANT and not partial.tool_uses else ""
        return self.result(status, text=self.display(raw) if raw else "", raw=raw, error=message,
                           error_kind=kind)

    def result(self, status: TurnStatus, *, text: str, raw: str, error: str | None = None,
               error_kind: str | None = None) -> TurnResult:
        return TurnResult(
            status=status, text=text, raw_text=raw, error=error, error_kind=error_kind,
            iterations=self.iteration, usage=self.usage, llm_calls=list(self.llm_calls),
            new_messages=list(self.new_messages),
            history=_trim(list(self.history), self.cfg.history_max_messages),
            trajectory_states=list(self.states), compactions=list(self.compactions))


async def run_turn(
    *,
    provider: Provider,
    config: TurnConfig,
    history: list[Message],
    user_message: str,
    tools: list[Tool],
    observer: Observer | None = None,
    cancel: CancelToken | None = None,
    approver: Approver | None = None,
    hooks: TurnHooks | None = None,
    clock: Callable[[], datetime] = _utc_now,
) -> TurnResult:
    """Run one turn. Never raises for provider, tool or approval failures, cancellation or
    timeouts: they end the turn with the matching ``TurnResult.status``. ``history`` is not
    modified; ``TurnResult.history`` is the history for the next turn."""
    turn = _Turn(provider=provider, config=config, history=history, user_message=user_message,
                 tools=tools, observer=observer or NullObserver(), cancel=cancel,
                 approver=approver, hooks=hooks, clock=clock)
    return await turn.run()
