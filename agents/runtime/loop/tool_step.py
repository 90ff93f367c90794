"""The tools one response asked for, run and answered in the order they were asked.

Duplicates (same name and arguments) are answered without running, before anyone is asked for
an approval. The rest run in parallel unless the config, an approval or a tool that changes
what the others may do (``SERIAL_TOOLS``) says serial. Every output, failures included, is
scrubbed of credentials and truncated before it reaches the history or an event. On
cancellation every call still gets a result, so the history stays valid. Then the loop
detector sees what ran. While a tool runs, the W3C ``traceparent`` that
``TurnConfig.traceparent_for`` gives its call is the current one (``tracecontext``), for the
tool to send on.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import history as history_ops
from ..cancel import CancelToken, StepTimedOut, TurnCancelled, guarded
from ..dispatch import ParsedResponse
from ..events import HookRan, LoopDetected, Observer, ToolFinished, ToolPolicyDecided, ToolStarted
from ..hooks import (
    POST_TOOL_USE,
    POST_TOOL_USE_FAILURE,
    PRE_TOOL_USE,
    Hook,
    HookRunResult,
    ToolHooks,
    hook_payload,
    merge_hook_feedback,
    rewrite_meta,
    rewritten_arguments,
    run_hooks,
)
from ..messages import Message, Role, ToolResultBlock, ToolUseBlock
from ..sanitize import bidi_visible
from ..scrub import scrub_secrets
from ..tools import ALLOW, ASK, DENY, Tool, ToolError, ToolResult
from ..tracecontext import traceparent_scope
from .approvals import Approver, ask_approval, declined_output
from .conversation import Conversation
from .detector import LoopDetector, call_signature
from .prompt import SystemPrompt
from .types import CANCELLED_OUTPUT, RESUME_INTERRUPTED_OUTPUT, TurnConfig, clip

DUPLICATE_OUTPUT = "Skipped duplicate tool call '{name}' with identical arguments in this turn."
# Tools that change what other calls of the same response may do; they never run in parallel.
SERIAL_TOOLS = frozenset({"tool_search"})
PREVIEW_CHARS = 200
PERMISSION_DENIED = "Permission denied: {reason}"


@dataclass(slots=True)
class _Outcome:
    output: str
    success: bool
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class ToolStep:
    def __init__(self, *, tools: Sequence[Tool], cfg: TurnConfig, conversation: Conversation,
                 prompt: SystemPrompt, observer: Observer, cancel: CancelToken | None,
                 approver: Approver | None, tool_hooks: ToolHooks | None = None) -> None:
        self.tools = {t.name: t for t in tools}
        self.hooks = tool_hooks or ToolHooks()
        self.cfg = cfg
        self.conversation = conversation
        self.prompt = prompt
        self.observer = observer
        self.cancel = cancel
        self.approver = approver
        self.detector = LoopDetector() if cfg.loop_detection else None
        self.started: set[str] = set()
        self.announced: dict[str, float] = {}  # calls whose ToolStarted is out, and when
        # When a call that waited for a person's approval could run (the wait is its own step).
        self.approved_at: dict[str, float] = {}
        self.finished: dict[str, ToolResultBlock] = {}
        self.invalid_arguments: dict[str, str] = {}

    async def run(self, iteration: int, parsed: ParsedResponse, *,
                  recorded: dict[str, ToolResultBlock] | None = None,
                  interrupted: frozenset[str] = frozenset(),
                  ) -> tuple[list[ToolResultBlock], str | None]:
        """Runs the calls and appends their results to the conversation. Returns the results
        and, when the loop detector says the turn must end, why.

        Resuming a stored turn (``Resume``), a call with a ``recorded`` result gets it without
        running or being reported again; an ``interrupted`` call runs again only when its tool
        is idempotent, otherwise it is answered with ``RESUME_INTERRUPTED_OUTPUT``."""
        # The parser stored unusable arguments as {}; the result tells the model what was wrong.
        self.invalid_arguments.update(parsed.argument_errors)
        recorded = recorded or {}
        calls = parsed.calls
        results: list[ToolResultBlock | None] = [None] * len(calls)
        counted: list[int] = []  # the calls the loop detector sees: all but duplicates
        executed: list[int] = []
        seen: set[tuple[str, str]] = set()
        # Duplicates are skipped before any approval, so nobody is asked twice for one call.
        for index, call in enumerate(calls):
            signature = call_signature(call)
            if call.id in recorded:
                results[index] = self.restore_call(call, recorded[call.id])
                if signature not in seen or call.name in self.cfg.dedup_exempt_tools:
                    counted.append(index)
                seen.add(signature)
                continue
            if signature in seen and call.name not in self.cfg.dedup_exempt_tools:
                results[index] = await self.finish_call(
                    iteration, call, _Outcome(DUPLICATE_OUTPUT.format(name=call.name), False), 0.0)
                continue
            seen.add(signature)
            counted.append(index)
            tool = self.tools.get(call.name)
            if call.id in interrupted and not (tool is not None and tool.idempotent):
                # Its start is on record already; only how it ended is reported.
                self.started.add(call.id)
                results[index] = await self.finish_call(
                    iteration, call, _Outcome(RESUME_INTERRUPTED_OUTPUT, False, "interrupted"), 0.0)
                continue
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
            self.conversation.append(Message.tool_results([r for r in results if r is not None]))
            raise cancelled

        final = [r for r in results if r is not None]
        verdicts = self.detect_loops(calls, final, counted)
        self.conversation.append(Message.tool_results(final))
        for level, message, tool in verdicts:
            await self.observer.emit(LoopDetected(iteration=iteration, level=level,
                                                  message=message, tool=tool))
        breaker = next((message for level, message, _ in verdicts if level == "break"), None)
        return final, breaker

    def restore_call(self, call: ToolUseBlock, result: ToolResultBlock) -> ToolResultBlock:
        block = ToolResultBlock(call.id, result.output, result.is_error, result.name or call.name)
        self.started.add(call.id)
        self.finished[call.id] = block
        return block

    def replay(self, messages: list[Message]) -> None:
        """The loop detector sees the calls of a stored turn's recorded iterations (and their
        results), so that resuming does not reset its count."""
        if self.detector is None:
            return
        # The detector judges by its last ``window`` calls: only the iterations that fill it
        # are replayed, from the latest back (a record of thousands of calls is not walked).
        iterations: list[list[tuple[ToolUseBlock, str]]] = []
        count = 0
        for index in range(len(messages) - 1, 0, -1):
            if count >= self.detector.window:
                break
            message, answer = messages[index - 1], messages[index]
            if message.role is not Role.ASSISTANT or answer.role is not Role.TOOL:
                continue
            outputs = {b.tool_use_id: b.output for b in answer.tool_results_blocks}
            seen: set[tuple[str, str]] = set()
            calls = []
            for call in message.tool_uses:
                signature = call_signature(call)
                if call.id not in outputs or (signature in seen
                                              and call.name not in self.cfg.dedup_exempt_tools):
                    continue
                seen.add(signature)
                calls.append((call, outputs[call.id]))
            iterations.append(calls)
            count += len(calls)
        for calls in reversed(iterations):
            for call, output in calls:
                self.detector.record(call.name, call.input, output)

    def run_in_parallel(self, calls: list[ToolUseBlock]) -> bool:
        if not self.cfg.parallel_tools or len(calls) < 2:
            return False
        for call in calls:
            tool = self.tools.get(call.name)
            if call.name in SERIAL_TOOLS or (tool is not None and tool.requires_approval):
                return False
        return True

    async def handle_call(self, iteration: int, call: ToolUseBlock) -> ToolResultBlock:
        self.started.add(call.id)
        started = time.perf_counter()
        try:
            outcome = await self.run_call(iteration, call)
        except TurnCancelled:
            await self.call_started(iteration, call)
            await self.finish_call(iteration, call, _Outcome(CANCELLED_OUTPUT, False, "cancelled"),
                                   self.ran_for(call, started))
            raise
        await self.call_started(iteration, call)
        return await self.finish_call(iteration, call, outcome, self.ran_for(call, started))

    async def call_started(self, iteration: int, call: ToolUseBlock) -> None:
        """The call's ``ToolStarted`` (the model's arguments), once: after its before-hooks, so
        that their steps come before the call's, in the order things happened."""
        if call.id in self.announced:
            return
        self.announced[call.id] = time.perf_counter()
        await self.observer.emit(ToolStarted(iteration=iteration, call_id=call.id, name=call.name,
                                             arguments=call.input))

    def ran_for(self, call: ToolUseBlock, started: float) -> float:
        """Seconds the call took from its ``ToolStarted`` (its before-hooks are steps of their
        own, before it); for one that waited for a person's approval (its own step), from the
        decision on: what ran then (the call and its after-hooks)."""
        began = self.announced.get(call.id, started)
        return max(time.perf_counter() - self.approved_at.pop(call.id, began), 0.0)

    async def run_call(self, iteration: int, call: ToolUseBlock) -> _Outcome:
        """Claw Code's order: the before-hooks, the permission (the tool's policy, a hook's
        override, a person's approval), the call, the after-hooks."""
        tool = self.tools.get(call.name)
        if tool is None:
            return _Outcome(f"Unknown tool: {call.name}", False, f"Unknown tool: {call.name}")
        problem = self.argument_problem(tool, call)
        if problem is not None:
            return _Outcome(f"Error: {problem}", False, problem)
        pre = await self.run_tool_hooks(iteration, call, PRE_TOOL_USE, self.hooks.pre)
        await self.call_started(iteration, call)
        rewritten: dict[str, Any] | None = None
        if pre.updated_input is not None and not (pre.denied or pre.cancelled):
            rewritten, problem = rewritten_arguments(tool.name, pre.updated_input, tool.arguments_problem)
            if problem is not None:
                return _Outcome(f"Error: {problem}", False, problem, meta=rewrite_meta(pre.updated_input))
            call = replace(call, input=rewritten)
        await tool.prepare_call(call.input)
        outcome, reason, source = self.authorize(tool, call, pre)
        await self.observer.emit(ToolPolicyDecided(
            iteration=iteration, call_id=call.id, name=call.name, policy=tool.policy,
            outcome=outcome, reason=reason, source=source))
        if outcome == DENY:
            output = merge_hook_feedback(pre.messages if source != "hook" else [],
                                         PERMISSION_DENIED.format(reason=reason), True)
            return _Outcome(output, False, PERMISSION_DENIED.format(reason=reason))
        if outcome == ASK:
            try:
                decision = await ask_approval(self.approver, call, iteration,
                                              timeout_s=self.cfg.approval_timeout_s,
                                              cancel=self.cancel, observer=self.observer)
            finally:
                self.approved_at[call.id] = time.perf_counter()
            if not decision.approved:
                output = declined_output(call.name, decision.reason)
                return _Outcome(output, False, output.split("\n", 1)[0])
        result = await self.execute(iteration, tool, call)
        if rewritten is not None:  # the step keeps what the model asked and what ran
            result.meta = {**result.meta, **rewrite_meta(json.dumps(rewritten, ensure_ascii=False, sort_keys=True))}
        result.output = merge_hook_feedback(pre.messages, result.output, False)
        if self.hooks.post:
            event = POST_TOOL_USE if result.success else POST_TOOL_USE_FAILURE
            post = await self.run_tool_hooks(iteration, call, event, self.hooks.post,
                                             output=result.output, is_error=not result.success)
            bad = post.denied or post.cancelled
            result.output = merge_hook_feedback(post.messages, result.output, bad or post.failed)
            if bad and result.success:
                result.success = False
                result.error = post.messages[0] if post.messages else f"{event} hook denied it"
        return result

    def authorize(self, tool: Tool, call: ToolUseBlock,
                  pre: HookRunResult) -> tuple[str, str, str]:
        """(outcome, reason, source). A hook that denies or is cancelled denies; one that
        fails only warns (its message reaches the model). Then the tool's policy: deny beats a
        hook's "allow"; "ask" from the policy or a hook puts the call to a person."""
        if pre.denied or pre.cancelled:
            reason = "\n".join(pre.messages) or (
                f"PreToolUse hook {'denied' if pre.denied else 'cancelled'} tool `{call.name}`")
            return DENY, reason, "hook"
        policy = tool.policy_for(call.input)
        if policy == DENY:
            return DENY, tool.policy_reason or f"tool '{call.name}' is not allowed to run", (
                tool.policy_source or "tool")
        if pre.permission_override == DENY:
            return DENY, pre.permission_reason or f"tool '{call.name}' denied by hook", "hook"
        if policy == ASK:
            return ASK, tool.policy_reason, tool.policy_source or "tool"
        if pre.permission_override == ASK:
            return ASK, pre.permission_reason or (
                f"tool '{call.name}' requires approval due to hook guidance"), "hook"
        return ALLOW, "", tool.policy_source or "tool"

    async def run_tool_hooks(self, iteration: int, call: ToolUseBlock, event: str,
                             hooks: Sequence[Hook],
                             *, output: str | None = None, is_error: bool = False) -> HookRunResult:
        if not hooks:
            return HookRunResult()
        arguments = json.dumps(call.input, ensure_ascii=False, sort_keys=True)
        payload = hook_payload(event, call.name, arguments, output, is_error)
        # A webhook hook sends the call's trace context on (``tracecontext``), as the tool does.
        with traceparent_scope(self.traceparent(iteration, call), self.cfg.tracestate):
            result = await guarded(run_hooks(hooks, event, payload, tool_name=call.name),
                                   cancel=self.cancel, limit_s=None)
        for run in result.runs:
            await self.observer.emit(HookRan(
                iteration=iteration, event=event, hook=run.hook, hook_kind=run.kind,
                decision=run.decision, call_id=call.id, tool=call.name,
                messages=[scrub_secrets(m) for m in run.messages],
                duration_ms=run.duration_ms, detail=run.detail))
        return result

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

    def traceparent(self, iteration: int, call: ToolUseBlock) -> str | None:
        """The W3C ``traceparent`` the call carries to the services it calls, if any."""
        make = self.cfg.traceparent_for
        return make(iteration, call.id) if make is not None else None

    async def execute(self, iteration: int, tool: Tool, call: ToolUseBlock) -> _Outcome:
        try:
            # Set in this task for the call only; the task ``guarded`` starts for the tool
            # inherits it. Parallel calls each run in a task of their own (``run``).
            with traceparent_scope(self.traceparent(iteration, call), self.cfg.tracestate):
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
            return _Outcome(result.output, True, meta=result.meta)
        reason = result.error or result.output or "the tool reported a failure"
        return _Outcome(f"Error: {reason}", False, reason, meta=result.meta)

    async def finish_call(self, iteration: int, call: ToolUseBlock, outcome: _Outcome,
                          seconds: float) -> ToolResultBlock:
        # Every output, failures included, is scrubbed before it reaches history or an event,
        # and its bidirectional controls written out (they would reorder what pages show).
        output = history_ops.truncate_tool_result(bidi_visible(scrub_secrets(outcome.output)),
                                                  self.cfg.max_tool_output_chars)
        error = scrub_secrets(outcome.error) if outcome.error else None
        if call.id not in self.started:
            self.started.add(call.id)
            await self.observer.emit(ToolStarted(iteration=iteration, call_id=call.id,
                                                 name=call.name, arguments=call.input))
        tool = self.tools.get(call.name)
        await self.observer.emit(ToolFinished(
            iteration=iteration, call_id=call.id, name=call.name, arguments=call.input,
            success=outcome.success, output=output, duration_ms=seconds * 1000, error=error,
            output_preview=clip(output, PREVIEW_CHARS),
            meta={**(tool.step_meta() if tool is not None else {}), **outcome.meta}))
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
                self.prompt.notices.append(f"[Loop Detection] {message}")
            elif level == "block":
                results[index] = ToolResultBlock(result.tool_use_id,
                                                 f"[Loop Detection — BLOCKED] {message}", True,
                                                 result.name)
        return verdicts
