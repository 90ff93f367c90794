"""How many tokens a model's context window holds: for the chat's meter, the turn's compaction
threshold and the check that a message fits at all.

What the admin configured wins (``configured``: the model's row of its provider, else the
provider's own setting; ``Provider.settings_for``). Otherwise the model catalogue says
(``traces.costs.pricing.model_limits``: the price table's rows, matched like prices, never by a
sibling model). Unknown models get ``DEFAULT_CONTEXT_WINDOW``.
"""

from __future__ import annotations

from typing import Any

from traces.costs.pricing import model_limits

DEFAULT_CONTEXT_WINDOW = 32_768


def context_window(model: str, configured: int | None = None, *, provider_kind: str = "",
                   team_id: int | None = None) -> int:
    """The context window of ``model``: the configured value, else the catalogue's."""
    if configured is not None and configured > 0:
        return configured
    name = (model or "").strip().lower()
    limits = model_limits(name, provider_kind, team_id=team_id) if name else None
    return (limits.context_window if limits else None) or DEFAULT_CONTEXT_WINDOW


# Estimates count about four characters a token; a model's own tokenizer may count more
# (SmolLM2's counted 5,718 where the estimate said 5,409): requests keep this much margin.
ESTIMATE_MARGIN = 1.1


def answer_reserve(window: int, max_output_tokens: int | None) -> int:
    """The part of the window kept for the answer: the agent's (or the model's) longest answer
    when set, else an eighth of the window."""
    if max_output_tokens:
        return min(int(max_output_tokens), window // 2)
    return window // 8


def agent_window(agent: Any, model: str) -> tuple[int, int]:
    """(the context window of ``agent`` answering with ``model``, the tokens kept for its
    answer)."""
    configured = agent.provider.settings_for(model)
    window = context_window(model, configured.context_window, provider_kind=agent.provider.kind,
                            team_id=agent.team_id)
    return window, answer_reserve(window, agent.max_output_tokens or configured.max_output_tokens)
