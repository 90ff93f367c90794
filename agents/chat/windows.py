"""How many tokens a model's context window holds, for the chat's meter.

What the admin configured wins (``configured``: the model's row of its provider, else the
provider's own setting; ``Provider.settings_for``). Otherwise the model catalogue says
(``traces.pricing.model_limits``: the price table's rows, matched like prices, never by a
sibling model). Unknown models get ``DEFAULT_CONTEXT_WINDOW``.
"""

from __future__ import annotations

from traces.pricing import model_limits

DEFAULT_CONTEXT_WINDOW = 32_768


def context_window(model: str, configured: int | None = None, *, provider_kind: str = "",
                   team_id: int | None = None) -> int:
    """The context window of ``model``: the configured value, else the catalogue's."""
    if configured is not None and configured > 0:
        return configured
    name = (model or "").strip().lower()
    limits = model_limits(name, provider_kind, team_id=team_id) if name else None
    return (limits.context_window if limits else None) or DEFAULT_CONTEXT_WINDOW
