"""The turn: iterations of a model request and the tools it asks for, and how a turn ends.

A turn ends with a final answer (asked once more when it lacks the format the request asked
for), on cancellation, on a failure (``EndTurn`` from a step, or
anything unexpected), or after ``max_tool_iterations`` with one last request, without tools,
for a summary. Whatever way it ends, open tool calls get a result and the ``TurnResult`` holds
the messages to store and the history for the next turn.

A stored turn is continued where its record ends (``Resume``): what it recorded is restored
without being reported again, and each assistant message this run adds is reported
(``MessageAppended``) so that a later run can continue from it in turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from ..builtin import resolve_timezone
from ..cancel import CancelToken, TurnCancelled
from ..dispatch import ParsedResponse, select_dispatcher
from ..events import FinalAnswer, MessageAppended, Observer, TrajectoryStateRecorded, TurnError
from ..hooks import ToolHooks
from ..messages import (
    ImageBlock,
    Message,
    Role,
    ToolResultBlock,
    ToolUseBlock,
    close_dangling_tool_uses,
)
from ..parsing import parse_tool_calls, strip_think_tags
from ..providers.base import ChatResponse, Provider, SystemBlock
from ..sanitize import sanitize_response
from ..scrub import scrub_secrets
from ..tools import Tool
from ..trajectory import (
    ObservedCall,
    TrajectoryState,
    build_trajectory_state,
    changed_fields,
    trajectory_state_prompt_block,
)
from .approvals import Approver
from .conversation import Conversation
from .model_step import ModelStep, assistant_message
from .prompt import SystemPrompt
from .tool_step import ToolStep
from .types import (
    CANCELLED_OUTPUT,
    INTERRUPTED_OUTPUT,
    EndTurn,
    Resume,
    TurnConfig,
    TurnHooks,
    TurnResult,
    TurnStatus,
)

DEFAULT_MAX_TOOL_ITERATIONS = 10
EXHAUSTION_PROMPT = (
    "You have reached the maximum number of tool iterations. Please provide your best answer "
    "based on the work completed so far. Summarize what you accomplished and what remains to be "
    "done."
)
EXHAUSTED_ERROR = "Agent exceeded maximum tool iterations ({max})"
FORMAT_REPAIR = ("Your answer was:\n\n{answer}\n\nIt does not have the format this request asked "
                 "for: {problem}. Answer again with only that, and nothing else.")
REPAIR_QUOTE_CHARS = 4_000
FORMAT_ERROR = ("The model's answer does not have the format the request asked for, even after "
                "being asked once more: {problem}")
EMPTY_SUMMARY = "asked to answer without tools, the model sent an empty answer"
LOOP_ABORT_ERROR = "Agent loop aborted by loop detector: {message}"
# The name the loop logged under before it became a package; log filters know it.
logger = logging.getLogger("agents.runtime.loop")


def utc_now() -> datetime:
    return datetime.now(UTC)


class Turn:
    def __init__(self, *, provider: Provider, config: TurnConfig, history: list[Message],
                 user_message: str, tools: Sequence[Tool], observer: Observer,
                 cancel: CancelToken | None, approver: Approver | None,
                 hooks: TurnHooks | None, clock: Callable[[], datetime],
                 resume: Resume | None = None, user_images: Sequence[ImageBlock] = (),
                 tool_hooks: ToolHooks | None = None) -> None:
        self.cfg = config
        self.resume = resume
        self.observer = observer
        self.user_text = user_message
        specs = [t.spec() for t in tools]
        self.tool_names = [s.name for s in specs]
        dispatcher = select_dispatcher(config.dispatcher, provider.capabilities_for(config.model))
        tool_section = dispatcher.system_section(specs)

        zone = resolve_timezone(config.timezone) or resolve_timezone("UTC")
        now = clock()
        now = (now if now.tzinfo else now.replace(tzinfo=UTC)).astimezone(zone)

        self.conversation = Conversation(
            history, user_message, now=now, dispatcher=dispatcher,
            max_messages=config.history_max_messages, compaction=config.compaction,
            observer=observer, images=user_images)
        self.prompt = SystemPrompt(config, tool_section=tool_section, now=now,
                                   zone_key=getattr(zone, "key", "UTC"))
        self.model_step = ModelStep(
            provider=provider, cfg=config, specs=specs, tool_names=self.tool_names,
            conversation=self.conversation, prompt=self.prompt, observer=observer, cancel=cancel,
            hooks=hooks)
        self.tool_step = ToolStep(
            tools=tools, cfg=config, conversation=self.conversation, prompt=self.prompt,
            observer=observer, cancel=cancel, approver=approver, tool_hooks=tool_hooks)

        self.iteration = 0
        self.states: list[TrajectoryState] = []
        self.state: TrajectoryState | None = None
        self.max_iterations = config.max_tool_iterations or DEFAULT_MAX_TOOL_ITERATIONS

    async def run(self) -> TurnResult:
        try:
            # Nested, so that a failure while ending the turn is handled like any other.
            try:
                self.conversation.prepare()
                first = 1
                if self.resume is not None:
                    resumed = await self.continue_record(self.resume)
                    if isinstance(resumed, TurnResult):
                        return resumed
                    first = resumed
                for iteration in range(first, self.max_iterations + 1):
                    self.iteration = iteration
                    response, parsed = await self.model_step.request(iteration, with_tools=True)
                    if not parsed.calls and self.cfg.answer_check is not None:
                        return await self.checked_answer(response, parsed)
                    await self.append_answer(iteration, assistant_message(response, parsed))
                    if not parsed.calls:
                        return await self.complete(response.text, TurnStatus.COMPLETED)
                    await self.check_before_tools(iteration, parsed)
                    ended = await self.run_tools(iteration, parsed)
                    if ended is not None:
                        return ended
                return await self.exhausted()
            except EndTurn as end:
                return await self.stop(end.status, end.message, end.kind, details=end.details)
        except TurnCancelled as exc:
            return await self.stop(TurnStatus.CANCELLED, exc.reason, "cancelled")
        except Exception as exc:
            logger.exception("turn failed unexpectedly")
            return await self.stop(TurnStatus.FAILED, f"Internal error: {exc}", "internal")

    async def append_answer(self, iteration: int, message: Message) -> None:
        """The model's message into the history, announced: the record a turn resumes from."""
        self.conversation.append(message)
        await self.observer.emit(MessageAppended(iteration=iteration, message=message.to_dict()))

    async def check_before_tools(self, iteration: int, parsed: ParsedResponse) -> None:
        """Ends the turn, with the calls unrun, when the hooks say the request that reads their
        results will not be made (a budget would refuse it)."""
        hooks = self.model_step.hooks
        if hooks is None:
            return
        names = list(dict.fromkeys(c.name for c in parsed.calls))
        reason = await hooks.before_tool_calls(iteration, self.model_step.usage, names)
        if reason:
            raise EndTurn(TurnStatus.FAILED, reason, "budget")

    async def run_tools(self, iteration: int, parsed: ParsedResponse, *,
                        recorded: dict[str, ToolResultBlock] | None = None,
                        interrupted: frozenset[str] = frozenset()) -> TurnResult | None:
        """Runs (or, resuming, settles) the iteration's calls and records its state; a result
        when the loop detector ends the turn."""
        results, breaker = await self.tool_step.run(iteration, parsed, recorded=recorded,
                                                    interrupted=interrupted)
        if self.cfg.trajectory_states:
            await self.record_state(iteration, parsed, results)
        if breaker is not None:
            return await self.stop(TurnStatus.FAILED, LOOP_ABORT_ERROR.format(message=breaker),
                                   "loop_detected")
        return None

    # -- resuming ------------------------------------------------------------------------------------
    async def continue_record(self, resume: Resume) -> TurnResult | int:
        """Takes up a stored turn where its record ends (``Resume``): the recorded messages,
        usage and state are restored without being reported again, the calls of an iteration
        left open are settled, and a recorded final answer ends the turn. Returns the
        iteration to go on with, or the result when the turn ends here."""
        messages, recorded = _open_iteration(resume)
        self.conversation.restore(messages)
        self.tool_step.replay(messages)
        self.model_step.usage = resume.usage
        if resume.state is not None:
            self.state = TrajectoryState.from_dict(resume.state)
            if self.cfg.inject_trajectory_state:
                self.prompt.state_block = SystemBlock(trajectory_state_prompt_block(self.state))
        last = messages[-1] if messages else None
        if last is None:
            return 1
        iteration = resume.iteration or sum(1 for m in messages if m.role is Role.ASSISTANT)
        self.iteration = iteration
        if last.role is Role.TOOL:
            await self.record_missing_state(iteration, messages)
            return iteration + 1
        if not last.tool_uses:
            status = (TurnStatus.MAX_ITERATIONS if iteration > self.max_iterations
                      else TurnStatus.COMPLETED)
            return await self.complete(last.text, status)
        ended = await self.run_tools(iteration, _as_parsed(last), recorded=recorded,
                                     interrupted=resume.interrupted)
        return ended if ended is not None else iteration + 1

    async def record_missing_state(self, iteration: int, messages: list[Message]) -> None:
        """A worker that stopped after an iteration's last result but before its state leaves
        the state to record here (``Resume.state`` is the last one recorded)."""
        if not self.cfg.trajectory_states or len(messages) < 2:
            return
        if self.state is not None and self.state.iteration >= iteration:
            return
        calls, answer = messages[-2], messages[-1]
        if calls.role is not Role.ASSISTANT or not calls.tool_uses:
            return
        results = {b.tool_use_id: b for b in answer.tool_results_blocks}
        parsed = _as_parsed(calls)
        await self.record_state(iteration, parsed, [results[c.id] for c in parsed.calls])

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
            self.prompt.state_block = SystemBlock(trajectory_state_prompt_block(state))
        await self.observer.emit(TrajectoryStateRecorded(iteration=iteration,
                                                         state=state.to_dict(), changed=changed))

    # -- endings -------------------------------------------------------------------------------------
    def display(self, raw: str) -> str:
        return sanitize_response(raw, self.tool_names)

    async def complete(self, raw: str, status: TurnStatus) -> TurnResult:
        text = self.display(raw)
        await self.observer.emit(FinalAnswer(text=text, iterations=self.iteration,
                                             usage=self.model_step.usage))
        return self.result(status, text=text, raw=raw)

    async def checked_answer(self, response: ChatResponse, parsed: ParsedResponse) -> TurnResult:
        """The final answer under the request's format check (``answer_check``): one it refuses
        is not kept; the model gets one more request, without tools, quoting it and saying
        what is wrong, and the turn fails when that answer is refused too."""
        check = self.cfg.answer_check
        assert check is not None
        problem = check(response.text)
        if problem is None:
            await self.append_answer(self.iteration, assistant_message(response, parsed))
            return await self.complete(response.text, TurnStatus.COMPLETED)
        self.iteration += 1
        quoted = response.text if len(response.text) <= REPAIR_QUOTE_CHARS else (
            response.text[:REPAIR_QUOTE_CHARS] + " …")
        response, _ = await self.model_step.request(
            self.iteration, with_tools=False,
            extra=Message.user(FORMAT_REPAIR.format(answer=quoted, problem=problem)))
        blocks = [b for b in response.message.blocks if not isinstance(b, ToolUseBlock)]
        await self.append_answer(self.iteration, Message(Role.ASSISTANT, blocks, response.usage))
        again = check(response.text)
        if again is not None:
            raise EndTurn(TurnStatus.FAILED, FORMAT_ERROR.format(problem=again), "invalid_output")
        return await self.complete(response.text, TurnStatus.COMPLETED)

    async def exhausted(self) -> TurnResult:
        limit = self.max_iterations
        self.iteration = limit + 1
        message = EXHAUSTED_ERROR.format(max=limit)
        response, _ = await self.model_step.request(
            self.iteration, with_tools=False, extra=Message.user(EXHAUSTION_PROMPT),
            failure=(TurnStatus.MAX_ITERATIONS, message, "max_iterations"))
        if response.text.strip():
            blocks = [b for b in response.message.blocks if not isinstance(b, ToolUseBlock)]
            await self.append_answer(self.iteration,
                                     Message(Role.ASSISTANT, blocks, response.usage))
            return await self.complete(response.text, TurnStatus.MAX_ITERATIONS)
        # What the model sent is said as it is: an empty answer, not only the limit.
        return await self.stop(TurnStatus.MAX_ITERATIONS, f"{message}; {EMPTY_SUMMARY}",
                               "max_iterations")

    async def stop(self, status: TurnStatus, message: str, kind: str, *,
                   details: str = "") -> TurnResult:
        self.conversation.close_open_calls(
            CANCELLED_OUTPUT if status is TurnStatus.CANCELLED else INTERRUPTED_OUTPUT)
        message = scrub_secrets(message)  # provider errors may quote a key
        await self.observer.emit(TurnError(message=message, error_kind=kind,
                                           iteration=self.iteration,
                                           details=scrub_secrets(details)))
        new_messages = self.conversation.new_messages
        partial = new_messages[-1] if len(new_messages) > 1 else None
        raw = partial.text if partial is not None and partial.role is Role.ASSISTANT and not partial.tool_uses else ""
        return self.result(status, text=self.display(raw) if raw else "", raw=raw, error=message,
                           error_kind=kind)

    def result(self, status: TurnStatus, *, text: str, raw: str, error: str | None = None,
               error_kind: str | None = None) -> TurnResult:
        model_step, conversation = self.model_step, self.conversation
        return TurnResult(
            status=status, text=text, raw_text=raw, error=error, error_kind=error_kind,
            iterations=self.iteration, usage=model_step.usage,
            llm_calls=list(model_step.llm_calls), new_messages=list(conversation.new_messages),
            history=conversation.history_for_next_turn(), trajectory_states=list(self.states),
            compactions=list(conversation.compactions))


def _open_iteration(resume: Resume) -> tuple[list[Message], dict[str, ToolResultBlock]]:
    """The recorded messages to restore, and the recorded results of the last assistant
    message's calls, for when they are not all answered. A tool-results message that answers
    only some of them is left out: its results count as recorded, and the settled iteration
    appends one message that answers every call."""
    messages = list(resume.messages)
    stray = next((m.role for m in messages if m.role not in (Role.ASSISTANT, Role.TOOL)), None)
    if stray is not None:
        raise ValueError("a resumed turn's messages are the assistant's and tool results, "
                         f"not {stray} messages")
    recorded = dict(resume.recorded)
    if (len(messages) >= 2 and messages[-1].role is Role.TOOL
            and messages[-2].role is Role.ASSISTANT and messages[-2].tool_uses):
        answered = {b.tool_use_id: b for b in messages[-1].tool_results_blocks}
        if any(use.id not in answered for use in messages[-2].tool_uses):
            recorded = {**answered, **recorded}
            messages.pop()
    # An earlier iteration left open (a record with a gap) is answered as interrupted, so the
    # history stays valid for the provider.
    tail = messages[-1:] if messages and messages[-1].tool_uses else []
    head = messages[:len(messages) - len(tail)]
    close_dangling_tool_uses(head, INTERRUPTED_OUTPUT)
    return [*head, *tail], recorded


def _as_parsed(message: Message) -> ParsedResponse:
    """A recorded assistant message as the dispatcher had parsed it: its text without
    text-form calls (as the trajectory state read it), and its calls."""
    calls = message.tool_uses
    text = message.text
    return ParsedResponse(
        text=parse_tool_calls(text)[0] if text else text, calls=calls,
        argument_errors={c.id: c.arguments_error for c in calls if c.arguments_error})
