"""A turn's messages through the team's message hooks: the person's on its way to the model
(on_message_received) and the final answer before it is stored (on_message_sending)."""

from __future__ import annotations

from agents.models import Message
from agents.runtime.hooks import MESSAGE_RECEIVED, MESSAGE_SENDING
from agents.tools.hooks import message_hooks_run
from agents.tools.hooks.messages import Emit
from agents.turns.builder import TurnSetup
from agents.turns.lifecycle import TurnOutcome
from agents.turns.turn_threads import TurnDb
from traces.models import Trace

DROPPED_MESSAGE = "A hook stopped this message before it reached the model: {reason}"
WITHHELD_REPLY = "The reply was withheld by a hook: {reason}"


async def message_received(setup: TurnSetup, *, trace: Trace, db: TurnDb, emit: Emit) -> str | None:
    """The person's message through the team's on_message_received hooks: a rewrite is
    what the model gets (the stored message stays as typed). Why one dropped it; None when
    none did."""
    verdict = await message_hooks_run(
        setup.received_hooks, event=MESSAGE_RECEIVED, text=setup.user_text,
        emit=emit, iteration=0, **await db(_hook_identity, trace))
    if verdict.action == "drop":
        return verdict.reason
    setup.user_text = verdict.text
    return None


async def message_sending(setup: TurnSetup, outcome: TurnOutcome, *, iteration: int, trace: Trace,
                          db: TurnDb, emit: Emit) -> None:
    """The final answer through the on_message_sending hooks before it is stored: a
    rewrite replaces it, a suppression stores a short notice instead (the trace's model
    request keeps the original)."""
    last = outcome.messages[-1] if outcome.messages else None
    if (outcome.status != Trace.Status.COMPLETED or last is None
            or last.role != Message.Role.ASSISTANT or not last.text.strip()):
        return
    verdict = await message_hooks_run(
        setup.sending_hooks, event=MESSAGE_SENDING, text=last.text, emit=emit,
        iteration=iteration, **await db(_hook_identity, trace))
    if verdict.action == "suppress":
        text = WITHHELD_REPLY.format(reason=verdict.reason)
    elif verdict.action == "rewrite":
        text = verdict.text
    else:
        return
    last.text = outcome.answer = text
    last.blocks = [{"type": "text", "text": text},
                   *(b for b in last.blocks if b.get("type") != "text")]


def _hook_identity(trace: Trace) -> dict[str, str]:
    """Who a message hook's payload names: the agent, the conversation and the sender."""
    return {"agent": trace.agent.name if trace.agent_id else "",
            "conversation": trace.conversation.uuid.hex,
            "sender": trace.user.get_username() if trace.user_id else ""}
