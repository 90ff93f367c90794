"""Configuration actions on providers: save one (its key encrypted, write-only) and test its
connection with one short chat."""

from __future__ import annotations

import asyncio
import copy
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.db import transaction

from agents.config.versions import agent_save
from agents.models import Agent, Provider
from agents.runtime.messages import Message as RuntimeMessage
from agents.runtime.providers import ChatRequest, ErrorKind, ProviderError
from agents.turns.providers import TurnSetupError, runtime_provider
from agentsite.audit import audit_record
from agentsite.audit import snapshot as audit_snapshot
from agentsite.crypto import SecretUnreadable, decrypt, encrypt
from agentsite.models import AuditEvent

# -- configuration: providers --------------------------------------------------------------------
# The admin's "Test connection": one short chat, a few tokens, a short time limit.
CONNECTION_TEST_PROMPT = "Reply with the single word OK."
CONNECTION_TEST_MAX_TOKENS = 8
CONNECTION_TEST_TIMEOUT_S = 20.0
# The model tried when no agent of the team uses the provider yet.
CONNECTION_TEST_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5", "demo": "demo"}


class KeyChange(StrEnum):
    """What a save did to a provider's stored API key."""

    KEPT = "kept"
    SET = "set"
    REPLACED = "replaced"
    CLEARED = "cleared"


@transaction.atomic
def provider_save(*, provider: Provider, api_key: str = "", clear_api_key: bool = False,
                  user: Any = None) -> KeyChange:
    """Save ``provider``. A non-empty ``api_key`` is encrypted and replaces the stored key;
    ``clear_api_key`` removes it; otherwise the stored key is kept. The clear key is never kept
    anywhere else (not on the instance, not in the audit trail).

    Fallbacks name providers: a rename is carried into the fallbacks of the team's agents (a new
    version and an audit row for each agent changed), so that they keep working."""
    api_key = (api_key or "").strip()
    if api_key and clear_api_key:
        raise ValidationError("Either enter a new API key or remove the stored one, not both.")
    stored = (Provider.objects.filter(pk=provider.pk).values("team_id", "name").first()
              if provider.pk is not None else None)
    if stored is not None and stored["team_id"] != provider.team_id:
        raise ValidationError("A provider cannot move to another team: its agents and routes "
                              "stay with their team. Create a new provider there instead.")
    had_key = bool(provider.api_key_encrypted)
    change = KeyChange.KEPT
    if clear_api_key and had_key:
        provider.api_key_encrypted = ""
        change = KeyChange.CLEARED
    elif api_key:
        provider.api_key_encrypted = encrypt(api_key)
        change = KeyChange.REPLACED if had_key else KeyChange.SET
    provider.save()
    if stored is not None and stored["name"] != provider.name:
        _fallbacks_rename(team_id=provider.team_id, old=stored["name"], new=provider.name, user=user)
    return change


def _fallbacks_rename(*, team_id: int, old: str, new: str, user: Any) -> None:
    for agent in Agent.objects.filter(team_id=team_id).select_related("team", "provider"):
        entries = agent.fallbacks if isinstance(agent.fallbacks, list) else []
        if not any(isinstance(e, dict) and e.get("provider") == old for e in entries):
            continue
        before = audit_snapshot(agent)
        agent.fallbacks = [{**e, "provider": new} if isinstance(e, dict) and e.get("provider") == old
                           else e for e in entries]
        agent_save(agent=agent, user=user)
        audit_record(actor=user, action=AuditEvent.Action.UPDATE, instance=agent, before=before,
                     after=audit_snapshot(agent))


@dataclass(frozen=True)
class ConnectionCheck:
    """The outcome of ``provider_test_connection``: ``message`` is a plain sentence for the page."""

    provider: str
    ok: bool
    message: str
    model: str
    latency_ms: int | None = None


def provider_test_model(provider: Provider) -> str:
    """The model a connection test asks for: the one an agent of the team uses with this
    provider, or a small model of the provider's kind."""
    used = (Agent.objects.filter(provider=provider).exclude(model="").order_by("name")
            .values_list("model", flat=True).first())
    return used or CONNECTION_TEST_MODELS.get(provider.kind, "demo")


def provider_test_connection(*, provider: Provider, model: str | None = None,
                             transport: httpx.AsyncBaseTransport | None = None) -> ConnectionCheck:
    """Send one tiny chat through ``provider`` as configured (decrypted key, headers, options)
    and report the latency or what went wrong, in plain words. ``transport`` replaces the
    network (tests pass an ``httpx.MockTransport``)."""
    return provider_test_connections(providers=[provider], model=model, transport=transport)[0]


def provider_test_connections(*, providers: list[Provider], model: str | None = None,
                              transport: httpx.AsyncBaseTransport | None = None,
                              ) -> list[ConnectionCheck]:
    """``provider_test_connection`` for several providers at once (they run concurrently)."""
    prepared: list[tuple[Provider, str, Any]] = []
    for row in providers:
        chosen = model or provider_test_model(row)
        try:
            prepared.append((row, chosen, _test_runtime_provider(row, transport)))
        except TurnSetupError as exc:
            prepared.append((row, chosen, ConnectionCheck(row.name, False, str(exc), chosen)))

    async def run_all() -> list[ConnectionCheck]:
        return list(await asyncio.gather(*(
            _connection_check(row, chosen, runtime) for row, chosen, runtime in prepared)))

    return async_to_sync(run_all)()


def _test_runtime_provider(row: Provider, transport: httpx.AsyncBaseTransport | None) -> Any:
    # Built by the same code as a turn's provider, from a copy of the row (never saved) with a
    # short timeout and, when given, a client on the injected transport. Kinds without HTTP
    # (the demo model) do not take a client; build_provider leaves it out for them.
    probe = copy.copy(row)
    probe.timeout_s = min(float(row.timeout_s or CONNECTION_TEST_TIMEOUT_S), CONNECTION_TEST_TIMEOUT_S)
    options = dict(row.options) if isinstance(row.options, dict) else {}
    if transport is not None:
        options["http_client"] = httpx.AsyncClient(transport=transport)
    probe.options = options
    return runtime_provider(probe)


async def _connection_check(row: Provider, model: str, runtime: Any) -> ConnectionCheck:
    if isinstance(runtime, ConnectionCheck):
        return runtime
    request = ChatRequest(model=model, messages=[RuntimeMessage.user(CONNECTION_TEST_PROMPT)],
                          max_tokens=CONNECTION_TEST_MAX_TOKENS)
    started = time.perf_counter()
    try:
        await asyncio.wait_for(runtime.chat(request), timeout=CONNECTION_TEST_TIMEOUT_S + 5)
    except ProviderError as exc:
        return ConnectionCheck(row.name, False, connection_error_message(exc, row=row, model=model,
                                                                         runtime=runtime), model)
    except TimeoutError:
        return ConnectionCheck(row.name, False, (
            f"The provider did not answer within {CONNECTION_TEST_TIMEOUT_S:.0f} seconds. Check "
            "that the server is up and reachable from this machine."), model)
    finally:
        client = getattr(runtime, "_client", None)
        await runtime.aclose()
        if client is not None and not getattr(runtime, "_owns_client", True):
            await client.aclose()
    latency_ms = round((time.perf_counter() - started) * 1000)
    what = " (the offline demo model)" if row.kind == Provider.Kind.DEMO else ""
    return ConnectionCheck(row.name, True, (
        f"Connected: the model “{model}” answered in {latency_ms} ms{what}."), model, latency_ms)


def connection_error_message(exc: ProviderError, *, row: Provider, model: str, runtime: Any = None) -> str:
    """A failed connection test in plain words: what it means, what to do, then the provider's
    own (already redacted) message."""
    where = (getattr(runtime, "base_url", "") or row.base_url or "the provider's endpoint")
    if exc.kind == ErrorKind.AUTH:
        if not row.has_api_key:
            headline = ("The provider asked for an API key and none is set. Enter the key, save, "
                        "and test again.")
        else:
            headline = ("The API key was rejected. Enter the current key for this account, save, "
                        "and test again.")
    elif exc.kind == ErrorKind.NETWORK:
        headline = (f"Could not reach {where}. Check the base URL and that the server is running "
                    "and reachable from this machine.")
    elif exc.kind == ErrorKind.TIMEOUT:
        headline = (f"{where} did not answer in time. Check that the server is up, or raise the "
                    "provider's timeout.")
    elif exc.kind == ErrorKind.MODEL_NOT_FOUND:
        headline = (f"The connection and the key work, but the provider does not know the model "
                    f"“{model}”. Check the model name of the agents that use this provider.")
    elif exc.kind == ErrorKind.RATE_LIMIT:
        headline = ("The key works, but the provider refused the request for rate-limit or quota "
                    "reasons. Wait a moment, or check the account's plan and credit.")
    elif exc.kind == ErrorKind.SERVER:
        headline = "The provider had a server error. This is usually temporary; test again shortly."
    elif exc.kind == ErrorKind.MALFORMED:
        headline = ("The server answered, but not like a chat API. Check that the base URL points "
                    "at the API (for OpenAI-compatible servers it usually ends in /v1).")
    else:
        headline = "The provider rejected the test request."
    detail = exc.message
    key = _clear_key_or_empty(row)
    if key:
        detail = detail.replace(key, "[redacted]")
    return f"{headline} Details: {detail}"


def _clear_key_or_empty(row: Provider) -> str:
    try:
        return decrypt(row.api_key_encrypted)
    except SecretUnreadable:
        return ""
