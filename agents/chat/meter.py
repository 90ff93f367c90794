"""The chat's meter: what the conversation has spent (every branch) and how much of the model's
context window the branch on screen fills. Its figures come from the conversation's turns; the
fill, from what the branch's last model request counted, or an estimate of the branch's messages
(``branch_estimate``, which a kept branch keeps with its HTML: ``agents.chat.kept_branch``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from agents.models import Conversation, Message
from agents.runtime.history import estimate_tokens
from agents.runtime.messages import Message as RuntimeMessage
from agents.team_config import kept, team_config_read
from agents.turns.windows import context_window
from traces.models import Trace

TOTALS = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens")


@dataclass
class Meter:
    """Tokens and cost spent in the conversation so far (every branch), and how much of the
    model's context window the next turn's history fills."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    context_tokens: int = 0
    context_window: int = 1
    # Model requests whose tokens are estimates (the server reported no usage).
    estimated_calls: int = 0
    # The model the branch's last turn ran on, when routing chose another than ``model``.
    last_model: str = ""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_write_tokens + self.cache_read_tokens

    @property
    def context_percent(self) -> int:
        return min(round(self.context_tokens * 100 / max(self.context_window, 1)), 999)


@dataclass(frozen=True)
class BranchEstimate:
    """What the branch's history would take of the context, estimated from its messages
    (system prompt included), and the turn that stored its last message (None: no turn)."""

    tokens: int
    last_turn: int | None


def branch_estimate(conversation: Conversation, history: list[Message]) -> BranchEstimate:
    """``history``: the branch's messages, oldest first (what the next turn would continue)."""
    agent = conversation.agent
    limit = agent.history_max_messages
    recent = history[-limit:] if limit > 0 else history
    messages = []
    for row in recent:
        try:
            messages.append(RuntimeMessage.from_dict({"role": row.role, "blocks": row.blocks or []}))
        except (KeyError, TypeError, ValueError):
            continue
    system = math.ceil(len(agent.system_prompt or "") / 4)
    last_turn = next((row.trace_id for row in reversed(history) if row.trace_id), None)
    return BranchEstimate(estimate_tokens(messages) + system, last_turn)


def conversation_meter(conversation: Conversation, *, traces: list[Trace],
                       estimate: BranchEstimate) -> Meter:
    """The meter of ``conversation`` whose turns are ``traces`` (with ``last_request_tokens``),
    for the branch ``estimate`` was made of."""
    agent = conversation.agent
    model = conversation.model_override or agent.model
    # Kept with the team's configuration, as a turn keeps it (``turn_config``): the model's row
    # of its provider and the catalogue's window cost two reads a page, one stamp here.
    with team_config_read(conversation.team_id):
        window = kept(conversation.team_id, ("meter-window", agent.provider_id, model), lambda: context_window(
            model, agent.provider.settings_for(model).context_window, provider_kind=agent.provider.kind,
            team_id=conversation.team_id))
    meter = Meter(model=model, context_window=window)
    for trace in traces:
        for name in TOTALS:
            setattr(meter, name, getattr(meter, name) + (getattr(trace, name) or 0))
        meter.cost_usd += trace.cost_usd or Decimal(0)
        meter.estimated_calls += trace.estimated_calls or 0
    # What the model itself counted on the branch's last request (system prompt, tool specs and
    # recalled memory included) plus its answer is the better figure; the estimate covers
    # a branch with no request yet and messages added since.
    last_turn = estimate.last_turn
    ran_on = next((t.model for t in traces if t.pk == last_turn), "") if last_turn else ""
    if ran_on and ran_on != model:
        meter.last_model = ran_on
    measured = next((t.last_request_tokens or 0 for t in traces if t.pk == last_turn), 0)
    meter.context_tokens = max(estimate.tokens, measured)
    return meter
