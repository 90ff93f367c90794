"""What a turn's loop came to, as its trace records it: the status, the error a person reads,
and the new messages to store."""

from __future__ import annotations

from datetime import datetime

from agents.models import Message
from agents.runtime.loop import TurnResult, TurnStatus
from agents.runtime.messages import Message as RuntimeMessage
from agents.runtime.messages import Role
from agents.runtime.providers.base import Outcome
from agents.runtime.sanitize import MALFORMED_REPLY, sanitize_response
from agents.turns.lifecycle import NewMessage, TurnOutcome
from traces.models import Trace
from traces.record.services import reason_sentence

Status = Trace.Status

INTERNAL_ERROR_MESSAGE = (
    "The turn stopped because of an internal error. The steps so far are kept. Try again; if "
    "it happens again, tell an admin (the worker's log has the details)."
)
STATUS_FOR = {
    TurnStatus.COMPLETED: Status.COMPLETED,
    TurnStatus.CANCELLED: Status.CANCELLED,
    TurnStatus.FAILED: Status.FAILED,
    TurnStatus.TIMED_OUT: Status.TIMED_OUT,
}
INCOMPLETE_OUTCOMES = (Outcome.LENGTH, Outcome.REFUSAL, Outcome.FILTERED)


def turn_outcome(result: TurnResult | None, *, tool_names: list[str], stop_cause: str | None,
                 time_limit_at: datetime | None, limit_message: str,
                 last_outcome: Outcome | None) -> TurnOutcome:
    """``result`` (None: the loop crashed or was abandoned) as the trace's outcome.
    ``stop_cause`` is why the turn stopped ("time_limit" when its time limit did, at
    ``time_limit_at``, with ``limit_message``); ``last_outcome`` how the last model request
    ended."""
    if result is None:
        if stop_cause == "time_limit":
            return TurnOutcome(status=Status.TIMED_OUT, error=limit_message,
                               error_kind="time_limit", stop_requested_at=time_limit_at)
        return TurnOutcome(status=Status.FAILED, error=INTERNAL_ERROR_MESSAGE,
                           error_kind="internal")
    status = STATUS_FOR.get(result.status, Status.FAILED)
    error, error_kind = result.error or "", result.error_kind or ""
    if result.status is TurnStatus.MAX_ITERATIONS:
        # The loop ran out of iterations; with a summary the user still got an answer.
        status = Status.COMPLETED if result.text.strip() else Status.FAILED
    if result.status is TurnStatus.CANCELLED and stop_cause == "time_limit":
        status, error, error_kind = Status.TIMED_OUT, limit_message, "time_limit"
    elif result.status is TurnStatus.CANCELLED:
        error = reason_sentence(error)
    return TurnOutcome(status=status, error=error, error_kind=error_kind,
                       stop_requested_at=time_limit_at if status == Status.TIMED_OUT else None,
                       answer=result.text, iterations=result.iterations,
                       messages=stored_messages(result.new_messages, tool_names,
                                                ending=_ending(result, status, last_outcome)))


def _ending(result: TurnResult, status: str, last_outcome: Outcome | None) -> str:
    """How the turn's last answer ended, when it is not a whole answer: the text streamed
    before the turn stopped (the runtime keeps it as the last message), or an answer the
    model cut off, refused, or had filtered."""
    if status != Status.COMPLETED:
        return Message.Outcome.INTERRUPTED if result.raw_text.strip() else ""
    return last_outcome.value if last_outcome in INCOMPLETE_OUTCOMES else ""


def stored_messages(messages: list[RuntimeMessage], tool_names: list[str], *,
                    ending: str = "") -> list[NewMessage]:
    """The turn's new messages as rows to store: everything after the user's own message
    (which the turn's start stored), with the text a reader sees. ``ending`` (a
    ``Message.Outcome``) marks the last message, when it is the assistant's."""
    rows = []
    for index, message in enumerate(messages):
        if index == 0 and message.role is Role.USER:
            continue
        text = message.text
        if message.role is Role.ASSISTANT and text.strip():
            text = sanitize_response(text, tool_names)
            if message.tool_uses and text == MALFORMED_REPLY:
                # Prompt-guided calls and nothing else: the text was the <tool_call> markup
                # of the calls the message holds, so there is nothing to show, and nothing
                # malformed.
                text = ""
        elif message.role is Role.TOOL:
            text = ""
        rows.append(NewMessage(role=str(message.role), blocks=message.to_dict()["blocks"],
                               text=text, usage=message.usage.to_dict() if message.usage else None))
    if ending and rows and rows[-1].role == Message.Role.ASSISTANT:
        rows[-1].outcome = ending
    return rows
