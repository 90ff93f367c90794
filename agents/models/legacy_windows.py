"""Moving context windows out of ``Provider.capabilities`` into fields and per-model rows of
their own (migration agents 0004), and back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class LegacyWindows:
    """``capabilities["context_window"]`` read apart: the provider's window (an int, or a
    per-model dict's "*"), each model's, and the capabilities without what was moved (a value
    that is not a positive whole number stays where it was: nothing is lost)."""

    provider: int | None
    per_model: dict[str, int]
    capabilities: dict[str, Any]


def _window(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and value > 0 else None


def legacy_windows_split(capabilities: Any) -> LegacyWindows:
    caps = dict(capabilities) if isinstance(capabilities, dict) else {}
    if "context_window" not in caps:
        return LegacyWindows(None, {}, caps)
    value = caps.pop("context_window")
    if not isinstance(value, dict):
        window = _window(value)
        if window is None:
            caps["context_window"] = value
        return LegacyWindows(window, {}, caps)
    provider, per_model, kept = None, {}, {}
    for name, size in value.items():
        window = _window(size)
        if window is None or not str(name).strip():
            kept[name] = size
        elif str(name).strip() == "*":
            provider = window
        else:
            per_model[str(name).strip()[:200]] = window
    if kept:
        caps["context_window"] = kept
    return LegacyWindows(provider, per_model, caps)


def legacy_windows_move(*, provider_model: Any, model_row_model: Any) -> int:
    """Move every provider's ``capabilities["context_window"]`` into ``context_window`` and
    per-model rows (a model's existing row keeps its own window). ``provider_model`` and
    ``model_row_model`` are the Provider and ProviderModel classes (a migration passes its
    historical ones). Returns the providers changed."""
    changed = 0
    for provider in provider_model.objects.exclude(capabilities={}).iterator():
        split = legacy_windows_split(provider.capabilities)
        if split.provider is None and not split.per_model:
            continue
        if split.provider is not None and provider.context_window is None:
            provider.context_window = split.provider
        existing = {m.model.strip().lower(): m for m in model_row_model.objects.filter(provider=provider)}
        for name, window in split.per_model.items():
            row = existing.get(name.lower())
            if row is None:
                existing[name.lower()] = model_row_model.objects.create(
                    provider=provider, model=name, context_window=window)
            elif row.context_window is None:
                row.context_window = window
                row.save(update_fields=["context_window"])
        provider.capabilities = split.capabilities
        provider.save(update_fields=["capabilities", "context_window"])
        changed += 1
    return changed


def legacy_windows_restore(*, provider_model: Any, model_row_model: Any) -> None:
    """The reverse: windows back into ``capabilities["context_window"]``."""
    for provider in provider_model.objects.all().iterator():
        windows = {m.model: m.context_window
                   for m in model_row_model.objects.filter(provider=provider, context_window__isnull=False)}
        if not windows and provider.context_window is None:
            continue
        caps = dict(provider.capabilities) if isinstance(provider.capabilities, dict) else {}
        if windows:
            if provider.context_window is not None:
                windows["*"] = provider.context_window
            caps["context_window"] = windows
        else:
            caps["context_window"] = provider.context_window
        provider.capabilities = caps
        provider.save(update_fields=["capabilities"])
