"""A team's webhook as a runtime hook: the event's JSON POSTed to the team's URL, signed.

The request (``WebhookHook.run``):

* ``POST <url>`` with the payload as JSON (``agents.runtime.hooks.hook_payload`` for tool
  events, ``message_payload`` for message events) and the headers
  ``Content-Type: application/json``, ``X-Agentsite-Event: <event>``,
  ``X-Agentsite-Hook: <hook uuid>``, ``X-Agentsite-Timestamp: <unix seconds>`` and
  ``X-Agentsite-Signature: sha256=<hex>`` (and, for a tool event of a traced turn, the tool
  call's W3C ``traceparent`` and the caller's ``tracestate``), where ``<hex>`` is the HMAC-SHA256, keyed with the
  hook's secret, of ``"<timestamp>.<body>"`` (the timestamp header, a dot, the exact body
  bytes). A receiver recomputes it, compares in constant time and refuses old timestamps
  (``signature_valid`` is the reference check).
* through the outbound-network policy (``agentsite.outbound.GuardedTransport``): the host is
  resolved once, every address vetted, the connection pinned to a vetted address; redirects
  are not followed; https, or plain http to a network the operator allowlisted (or while
  ``DEBUG`` is on);
* one time limit, the hook's ``timeout_s``, for the whole exchange; at most
  ``MAX_ANSWER_BYTES`` of answer are read.

The answer: a 2xx with a JSON object ``{"decision": "allow" | "deny" | "warn", "message":
"...", "content": "...", "tool_input": {...}}`` (every key optional; no decision is "allow"). "deny" denies the tool
call (a message hook: drops the message or suppresses the reply), "warn" allows with the
message as a warning, ``content`` (message hooks) is the rewritten text, ``tool_input`` (or
Claude Code's ``updatedInput``, at the top or under ``hookSpecificOutput``; a before-tool
hook) the call's rewritten arguments. Anything else (a
refused address, no answer in time, a non-2xx status, an answer that is not a JSON object, an
unknown decision) is a *failed* run with a message saying which; the loop treats a failed hook
as a warning.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.conf import settings

from agents.runtime.hooks import (
    MAX_HOOK_OUTPUT_CHARS,
    PRE_TOOL_USE,
    TOOL_EVENTS,
    HookRun,
    matcher_matches,
)
from agents.runtime.scrub import scrubbed_line
from agents.runtime.tracecontext import current_trace_context
from agentsite.outbound import allowed_networks, base_url_problem, parse_ip
from agentsite.outbound.transport import GuardedTransport

MAX_ANSWER_BYTES = 64 * 1024
USER_AGENT = "agentsite-hooks/1.0"
# How old a signed request a receiver should still accept (``signature_valid``).
SIGNATURE_TOLERANCE_S = 300
DECISIONS = ("allow", "deny", "warn")


# -- signing ------------------------------------------------------------------------------------
def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" keyed with secret>``."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={digest.hexdigest()}"


def signature_valid(secret: str, *, timestamp: str, body: bytes, header: str,
                    now: float | None = None, tolerance_s: float = SIGNATURE_TOLERANCE_S) -> bool:
    """What a receiver checks: the signature matches and the timestamp is recent."""
    try:
        age = abs((time.time() if now is None else now) - int(timestamp))
    except ValueError:
        return False
    return age <= tolerance_s and hmac.compare_digest(signature(secret, timestamp, body), header)


# -- the URL ------------------------------------------------------------------------------------
def _allowlisted(addresses: list[str]) -> bool:
    networks = allowed_networks()
    parsed = [parse_ip(a) for a in addresses]
    return bool(parsed) and all(
        ip is not None and any(ip.version == n.version and ip in n for n in networks)
        for ip in parsed)


def _host_addresses(url: httpx.URL) -> list[str]:
    host = url.raw_host.decode("ascii", "replace")
    if parse_ip(host) is not None:
        return [host.strip("[]")]
    try:
        infos = socket.getaddrinfo(host, url.port or 80, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return [str(info[4][0]) for info in infos]


def webhook_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a webhook's URL, as a sentence; None when it can. The outbound
    policy decides the host; the scheme is https, or http for a host inside the operator's
    allowlist (an internal service) or while ``DEBUG`` is on."""
    url = (url or "").strip()
    if not url:
        return "A webhook needs a URL."
    problem = base_url_problem(url)
    if problem is not None:
        return problem
    parsed = httpx.URL(url)
    if parsed.scheme == "https":
        return None
    if parsed.scheme == "http" and (settings.DEBUG or _allowlisted(_host_addresses(parsed))):
        return None
    return "A webhook URL must start with https:// (plain http only for an allowlisted internal address)."


# -- the hook -----------------------------------------------------------------------------------
@dataclass(slots=True)
class WebhookHook:
    """A team's webhook (``agents.models.Hook`` of kind "webhook") as a runtime ``Hook``.
    ``transport``: for tests; by default the outbound policy's ``GuardedTransport``."""

    name: str
    url: str
    secret: str = field(repr=False)
    matcher: str | None = None
    timeout_s: float = 5.0
    uuid: str = ""
    transport: httpx.AsyncBaseTransport | None = field(default=None, repr=False)
    kind: str = "webhook"

    def matches(self, tool_name: str) -> bool:
        return matcher_matches(self.matcher, tool_name)

    async def run(self, event: str, payload: dict[str, Any]) -> HookRun:
        run = HookRun(hook=self.name, kind=self.kind, event=event)
        started = time.perf_counter()
        try:
            status, answer = await asyncio.wait_for(self._post(event, payload), self.timeout_s)
        except TimeoutError:
            self._fail(run, f"did not answer within {self.timeout_s:g} s", "timeout")
        except _Refused as exc:
            self._fail(run, str(exc), "refused")
        except httpx.UnsupportedProtocol as exc:  # GuardedTransport's OutboundBlocked
            self._fail(run, str(exc), "refused")
        except httpx.HTTPError as exc:
            self._fail(run, f"could not be reached ({exc or type(exc).__name__})", "network")
        else:
            run.detail = f"HTTP {status}"
            self._read(run, event, payload, status, answer)
        run.duration_ms = (time.perf_counter() - started) * 1000
        return run

    def _fail(self, run: HookRun, why: str, detail: str) -> None:
        run.outcome = "failed"
        run.detail = detail
        run.messages.append(f"Webhook `{self.name}` {why}")

    async def _post(self, event: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        url = httpx.URL(self.url)
        await self._check_scheme(url)
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
                   "X-Agentsite-Event": event, "X-Agentsite-Hook": self.uuid,
                   "X-Agentsite-Timestamp": timestamp,
                   "X-Agentsite-Signature": signature(self.secret, timestamp, body),
                   # The tool call's W3C trace context, when the turn is traced: the receiver's
                   # spans join the turn's trace under the call's span.
                   **current_trace_context()}
        async with httpx.AsyncClient(transport=self.transport or GuardedTransport(),
                                     trust_env=False, follow_redirects=False,
                                     timeout=httpx.Timeout(self.timeout_s)) as client:
            async with client.stream("POST", url, content=body, headers=headers) as response:
                return response.status_code, await _read_bounded(response)

    async def _check_scheme(self, url: httpx.URL) -> None:
        if url.scheme == "https":
            return
        if url.scheme != "http":
            raise _Refused(f"was refused: only https URLs are posted to, not '{url.scheme}'")
        if settings.DEBUG:
            return
        host = url.raw_host.decode("ascii", "replace")
        if parse_ip(host) is not None:
            addresses = [host.strip("[]")]
        else:
            loop = asyncio.get_running_loop()
            try:
                infos = await loop.getaddrinfo(host, url.port or 80, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError):
                infos = []
            addresses = [str(info[4][0]) for info in infos]
        if not _allowlisted(addresses):
            raise _Refused("was refused: plain http is only for an allowlisted internal address; "
                           "use https")

    def _read(self, run: HookRun, event: str, payload: dict[str, Any], status: int,
              answer: bytes) -> None:
        if answer is None:
            run.outcome = "failed"
            run.messages.append(f"Webhook `{self.name}` answered with more than "
                                f"{MAX_ANSWER_BYTES // 1024} KB")
            return
        if not 200 <= status < 300:
            run.outcome = "failed"
            run.messages.append(f"Webhook `{self.name}` answered HTTP {status}")
            return
        text = answer.decode("utf-8", errors="replace").strip()
        if not text:
            return  # an empty 2xx allows
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            run.outcome = "failed"
            run.messages.append(f"Webhook `{self.name}` did not answer with a JSON object "
                                f"(it began: {scrubbed_line(text[:2000], 80)!r})")
            return
        decision = value.get("decision", "allow")
        if decision not in DECISIONS:
            run.outcome = "failed"
            run.messages.append(f"Webhook `{self.name}` answered an unknown decision "
                                f"{str(decision)[:40]!r} (allow, deny or warn)")
            return
        message = value.get("message")
        if isinstance(message, str) and message.strip():
            run.messages.append(message[:MAX_HOOK_OUTPUT_CHARS])
        content = value.get("content")
        if isinstance(content, str) and event not in TOOL_EVENTS:
            run.content = content[:MAX_HOOK_OUTPUT_CHARS]
        if event == PRE_TOOL_USE and not self._read_arguments(run, value):
            return
        if decision == "deny":
            run.outcome = "deny"
            if not run.messages:
                what = (f"tool `{payload.get('tool_name')}`" if event in TOOL_EVENTS
                        else "the message")
                run.messages.append(f"Webhook `{self.name}` denied {what}")
        elif decision == "warn":
            run.warn = True
            if not run.messages:
                run.messages.append(f"Webhook `{self.name}` warned without a message")


    def _read_arguments(self, run: HookRun, value: dict[str, Any]) -> bool:
        """The call's rewritten arguments, if the answer has them: ``tool_input``, or
        ``updatedInput`` (at the top or under ``hookSpecificOutput``, as Claude Code's hooks
        answer). False (a failed run) when they are not a JSON object."""
        specific = value.get("hookSpecificOutput")
        rewritten = value.get("tool_input", value.get("updatedInput"))
        if isinstance(specific, dict) and "updatedInput" in specific:
            rewritten = specific["updatedInput"]
        if rewritten is None:
            return True
        if not isinstance(rewritten, dict):
            run.outcome = "failed"
            run.messages.append(f"Webhook `{self.name}` answered arguments that are not a JSON object")
            return False
        run.updated_input = json.dumps(rewritten, sort_keys=True, separators=(",", ":"))
        return True


class _Refused(Exception):
    pass


async def _read_bounded(response: httpx.Response) -> Any:
    """The body, or None when it is longer than ``MAX_ANSWER_BYTES``."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        return None
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            return None
        parts.append(chunk)
    return b"".join(parts)
