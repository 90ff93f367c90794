"""How many tokens a model's context window holds, for the chat's meter.

A provider can say in its capabilities (admin, Provider → Capabilities), either for every
model it serves or per model:

    {"context_window": 131072}
    {"context_window": {"llama3.1:8b": 131072, "*": 8192}}

Otherwise the model catalogue says (``traces.pricing.model_limits``: the price table's rows,
matched like prices, never by a sibling model). Unknown models get ``DEFAULT_CONTEXT_WINDOW``.
"""

from __future__ import annotations

from typing import Any

from traces.pricing import model_limits

DEFAULT_CONTEXT_WINDOW = 32_768


def _positive_int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def context_window(model: str, capabilities: dict[str, Any] | None = None, *,
                   provider_kind: str = "", team_id: int | None = None) -> int:
    """The context window of ``model``: the provider's configured value, else the catalogue's."""
    name = (model or "").strip().lower()
    configured = (capabilities or {}).get("context_window") if isinstance(capabilities, dict) else None
    if isinstance(configured, dict):
        lowered = {str(k).lower(): v for k, v in configured.items()}
        found = _positive_int(lowered.get(name)) or _positive_int(lowered.get("*"))
        if found:
            return found
    elif configured is not None and _positive_int(configured):
        return _positive_int(configured) or DEFAULT_CONTEXT_WINDOW
    limits = model_limits(name, provider_kind, team_id=team_id) if name else None
    return (limits.context_window if limits else None) or DEFAULT_CONTEXT_WINDOW
