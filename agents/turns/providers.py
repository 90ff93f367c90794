"""Provider construction: a provider row as a runtime provider (its key decrypted for the
outgoing request only), wrapped with retries and the agent's fallbacks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from agents.models import Agent, Provider
from agents.runtime.events import Retry
from agents.runtime.providers import build_provider
from agents.runtime.providers._http import HttpProvider
from agents.runtime.providers.base import Provider as RuntimeProvider
from agents.runtime.providers.reliable import ReliableProvider
from agentsite.crypto import SecretUnreadable, decrypt
from agentsite.outbound.transport import GuardedTransport

OnRetry = Callable[[Retry], Awaitable[None]]


class TurnSetupError(Exception):
    """Configuration that cannot run; the message tells the user what to do."""


def provider_api_key(provider: Provider) -> str:
    """The provider's API key in clear, or "" when it has none. For the outgoing request only:
    never render, log or trace it. A key that cannot be decrypted (the encryption key changed)
    is a ``TurnSetupError`` that says what to do."""
    try:
        return decrypt(provider.api_key_encrypted)
    except SecretUnreadable as exc:
        raise TurnSetupError(f"Provider “{provider.name}”: {exc}") from exc


def runtime_provider(row: Provider) -> RuntimeProvider:
    """``row`` as a runtime provider, with its capability overrides and its models' own."""
    options: dict[str, Any] = dict(row.options or {}) if isinstance(row.options, dict) else {}
    try:
        extra_headers = row.extra_headers()
    except SecretUnreadable as exc:
        raise TurnSetupError(f"Provider “{row.name}”'s extra headers: {exc}") from exc
    options.update(
        name=row.name, base_url=row.base_url or None, api_key=provider_api_key(row) or None,
        timeout=row.timeout_s, extra_headers=extra_headers or None,
        capabilities=row.runtime_capabilities() or None)
    if "http_client" not in options:
        # Every request to the base URL an admin set goes through the outbound-network policy.
        options["transport"] = GuardedTransport()
    try:
        return build_provider(row.kind, **options)
    except (TypeError, ValueError) as exc:
        raise TurnSetupError(
            f"Provider “{row.name}” could not be set up: {exc} Ask an admin to check its "
            "settings.") from exc


def reliable_provider(*, agent: Agent, primary: Provider,
                      on_retry: OnRetry | None) -> tuple[ReliableProvider, list[dict[str, str]], list[str]]:
    """The chosen provider wrapped with retries and the agent's fallbacks, in order."""
    slots: list[RuntimeProvider | tuple[RuntimeProvider, str | None]] = [runtime_provider(primary)]
    used: list[dict[str, str]] = []
    warnings: list[str] = []
    entries = agent.fallbacks if isinstance(agent.fallbacks, list) else []
    names = {str(e.get("provider", "")) for e in entries if isinstance(e, dict)}
    rows = {p.name: p for p in Provider.objects.filter(team_id=agent.team_id, name__in=names)
            .prefetch_related("model_settings")} if names else {}  # most agents have no fallbacks
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        name, model = str(entry.get("provider") or ""), str(entry.get("model") or "")
        row = rows.get(name)
        if row is None:
            warnings.append(f"Fallback provider “{name}” does not exist and was skipped.")
            continue
        try:
            slots.append((runtime_provider(row), model or None))
        except TurnSetupError as exc:
            warnings.append(f"Fallback skipped: {exc}")
            continue
        used.append({"provider": name, "model": model})
    # A stream that stops sending is given up on well within the step's time, so its retries
    # and the fallbacks still fit in it.
    idle = min(settings.MODEL_STREAM_IDLE_TIMEOUT_S, max(agent.step_timeout_s / 4, 1.0))
    for slot in slots:
        provider = slot[0] if isinstance(slot, tuple) else slot
        if isinstance(provider, HttpProvider):
            provider.stream_idle_s = idle
    return ReliableProvider(slots, on_retry=on_retry, name=primary.name), used, warnings
