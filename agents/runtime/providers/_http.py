"""What the HTTP providers share: the client and the mapping of failures to errors.

Every failure leaves as a ``ProviderError`` whose message is a plain sentence saying what went
wrong and what to do, followed by the provider's own words. API keys never appear in it: the
provider's key is replaced wherever it occurs, and anything shaped like a key or a bearer
token is masked as well.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..scrub import redact
from ._redact import ERROR_DETAIL_LIMIT, sanitize_detail
from .base import ErrorKind, Provider, ProviderError
from .retry_rules import (
    is_context_window_exceeded,
    is_non_retryable_rate_limit,
    is_tool_schema_error,
    parse_retry_after_ms,
)

DEFAULT_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0
# The provider's own words are kept up to this many characters: long validation errors (a
# pydantic dump from a local server) name their cause far from the start.

_UNKNOWN_MODEL_HINTS = (
    "model_not_found", "not a valid model", "unknown model", "invalid model", "no such model",
    "does not exist", "not found", "not supported", "unsupported model",
)


def provider_detail(body: str) -> str:
    """The provider's own error message from an error body (JSON or text)."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return body.strip()
    return _message_in(data) or body.strip()


def _message_in(data: Any) -> str:
    if isinstance(data, str):
        return data
    if isinstance(data, list) and data:
        return _message_in(data[0])
    if not isinstance(data, dict):
        return ""
    for key in ("error", "message", "detail"):
        if key in data:
            found = _message_in(data[key])
            if found:
                return found
    return ""


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


def _retry_after_in_text(text: str) -> float | None:
    # The body sometimes says when to come back ("retry_after: 2.5", "Retry-After 7").
    millis = parse_retry_after_ms(text)
    return millis / 1000.0 if millis is not None else None


# A 500 whose body is a validation error: the server refused this request's shape and will
# refuse it again (llama-cpp-python answers a body its pydantic model rejects with a 500).
_VALIDATION_HINTS = re.compile(
    r"validation error|validationerror|pydantic|input should be|field required|"
    r"extra inputs are not permitted|\binvalid\b|\bmust be\b|is not of type|json schema|"
    r"jsonschema|unprocessable")


def is_validation_error(detail: str) -> bool:
    return bool(_VALIDATION_HINTS.search(detail.lower()))


def classify_status(status: int, detail: str) -> tuple[ErrorKind, bool]:
    lower = detail.lower()
    if status == 413 or is_context_window_exceeded(detail) or "context_length_exceeded" in lower:
        return ErrorKind.CONTEXT_OVERFLOW, False
    if status in (401, 403):
        return ErrorKind.AUTH, False
    if status == 429:
        return ErrorKind.RATE_LIMIT, not is_non_retryable_rate_limit(f"429 Too Many Requests {detail}")
    if status == 408:
        return ErrorKind.TIMEOUT, True
    if status == 500 and is_validation_error(detail):
        return ErrorKind.BAD_REQUEST, False
    if status >= 500:
        return ErrorKind.SERVER, True
    if is_tool_schema_error(detail):
        # The model called a tool it was not offered; a fresh sample usually does better.
        return ErrorKind.BAD_REQUEST, True
    if status == 404 and "model" in lower:
        return ErrorKind.MODEL_NOT_FOUND, False
    if status == 400 and "model" in lower and any(h in lower for h in _UNKNOWN_MODEL_HINTS):
        return ErrorKind.MODEL_NOT_FOUND, False
    return ErrorKind.BAD_REQUEST, False


def _headline(kind: ErrorKind, status: int, retryable: bool, model: str) -> str:
    if kind == ErrorKind.AUTH and status == 403:
        return ("The API key is not allowed to make this request (403). Check the key's "
                "permissions and the model's availability in the provider's console.")
    if kind == ErrorKind.AUTH:
        return f"The API key was rejected ({status}). Check the provider's key in the admin."
    if kind == ErrorKind.RATE_LIMIT and retryable:
        return ("The provider is rate limiting requests (429). Wait a moment and try again; "
                "if it keeps happening, lower the request rate or raise the account's limits.")
    if kind == ErrorKind.RATE_LIMIT:
        return ("The provider refused the request for quota or billing reasons (429). "
                "Check the account's plan and credit.")
    if kind == ErrorKind.CONTEXT_OVERFLOW:
        return (f"The conversation is too long for the model's context window ({status}). "
                "Older messages must be compacted or removed.")
    if kind == ErrorKind.MODEL_NOT_FOUND:
        return (f"The model '{model}' was not found ({status}). "
                "Check the model name in the agent's settings.")
    if kind == ErrorKind.TIMEOUT:
        return f"The provider timed out ({status}). Try again."
    if kind == ErrorKind.SERVER:
        return f"The provider had a server error ({status}). This is usually temporary; try again."
    if status >= 500:
        return (f"The provider could not accept the request ({status}): it reported a "
                "validation error, so sending it again will not help.")
    if retryable:
        return (f"The provider refused the model's tool call ({status}): the model called a "
                "tool it was not offered. Trying again usually helps.")
    if status == 404:
        return "The provider's endpoint was not found (404). Check the provider's base URL."
    return f"The provider rejected the request ({status})."


def status_error(status: int, headers: Mapping[str, str], body: str, *, provider: str,
                 model: str, secrets: Iterable[str] = (), now: datetime | None = None,
                 ) -> ProviderError:
    """The error for a refused request. The message is a short headline followed by the
    provider's own words, whole up to ``ERROR_DETAIL_LIMIT`` characters; those words alone are
    on ``ProviderError.detail``."""
    secrets = tuple(secrets)
    detail = sanitize_detail(provider_detail(body), secrets, limit=ERROR_DETAIL_LIMIT)
    # Classify on the whole body too: codes such as "insufficient_quota" sit beside the message.
    kind, retryable = classify_status(status, f"{detail} {body[:ERROR_DETAIL_LIMIT]}")
    message = _headline(kind, status, retryable, model)
    if detail:
        message = f"{message} Provider said: {detail}"
    retry_after = parse_retry_after(headers, now)
    if retry_after is None and retryable:
        retry_after = _retry_after_in_text(detail)
    return ProviderError(redact(message, secrets), retryable=retryable, kind=kind, status=status,
                         retry_after=retry_after, provider=provider, model=model, detail=detail)


def network_error(exc: httpx.HTTPError, *, url: str, provider: str, model: str,
                  secrets: Iterable[str] = ()) -> ProviderError:
    secrets = tuple(secrets)
    where = _origin(url)
    reason = sanitize_detail(str(exc) or type(exc).__name__, secrets)
    if isinstance(exc, httpx.TimeoutException):
        message = (f"The provider at {where} did not answer in time ({type(exc).__name__}). "
                   "Check that the server is up; the request can be retried.")
        kind, retryable = ErrorKind.TIMEOUT, True
    elif isinstance(exc, httpx.ConnectError):
        message = (f"Could not connect to the provider at {where}. Check the base URL and "
                   f"that the server is running. ({reason})")
        kind, retryable = ErrorKind.NETWORK, True
    elif isinstance(exc, httpx.TransportError) and not isinstance(
            exc, httpx.UnsupportedProtocol | httpx.ProxyError):
        message = f"The connection to the provider at {where} broke off. ({reason})"
        kind, retryable = ErrorKind.NETWORK, True
    else:
        message = f"The request to the provider at {where} could not be made. ({reason})"
        kind, retryable = ErrorKind.BAD_REQUEST, False
    return ProviderError(redact(message, secrets), retryable=retryable, kind=kind,
                         provider=provider, model=model)


def malformed_error(what: str, *, provider: str, model: str,
                    partial_text: str = "") -> ProviderError:
    return ProviderError(f"The provider sent a response that could not be read: {what}. "
                         "Try again.", retryable=True, kind=ErrorKind.MALFORMED,
                         provider=provider, model=model, partial_text=partial_text)


def cut_off_error(*, provider: str, model: str, partial_text: str = "") -> ProviderError:
    """A stream that stopped before the model finished: the answer is incomplete, and the same
    request may well succeed."""
    received = " after part of the answer had arrived" if partial_text else ""
    return ProviderError(f"The provider's answer was cut off: the stream ended{received} "
                         "without saying the answer was finished. Try again.", retryable=True,
                         kind=ErrorKind.MALFORMED, provider=provider, model=model,
                         partial_text=partial_text)


def stalled_error(*, provider: str, model: str, idle_s: float) -> ProviderError:
    """A stream that stopped sending (the connection open, no data for ``idle_s``): like a cut
    stream, the same request may well succeed, here or on a fallback."""
    return ProviderError(f"The provider's answer stalled: its stream sent nothing for {idle_s:g} s. "
                         "Try again.", retryable=True, kind=ErrorKind.TIMEOUT, provider=provider,
                         model=model)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else url


class HttpProvider(Provider):
    """A provider that posts JSON to one endpoint with an ``httpx.AsyncClient``.

    The client is created lazily (on ``transport`` when given), or passed in (tests pass one on
    an ``httpx.MockTransport``); only a client created here is closed by ``aclose``."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        timeout: float = DEFAULT_TIMEOUT_S,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        capabilities: dict[str, Any] | None = None,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        name: str = "",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or ""
        self.timeout = httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S))
        self.extra_headers = dict(extra_headers or {})
        self.extra_body = dict(extra_body or {})
        self._client = http_client
        self._owns_client = http_client is None
        # The transport of the client made here (the platform passes one that enforces its
        # outbound-network policy).
        self._transport = transport
        # Once a stream has started, the longest it may send nothing before it counts as
        # stalled (``stream_lines``); None: only the request's read timeout.
        self.stream_idle_s: float | None = None
        super().__init__(name=name, capabilities=capabilities)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self.base_url!r})"

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout, transport=self._transport)
        return self._client

    @property
    def _secrets(self) -> tuple[str, ...]:
        # The key and the extra headers' values: an error body that echoes one is redacted.
        values = [self._api_key, *self.extra_headers.values()]
        return tuple(v for v in values if v and len(v) >= 6)

    def auth_headers(self) -> dict[str, str]:
        return {}

    def headers(self) -> dict[str, str]:
        return {"content-type": "application/json", **self.extra_headers, **self.auth_headers()}

    async def post_json(self, url: str, payload: dict[str, Any], model: str) -> dict[str, Any]:
        try:
            response = await self.client.post(url, json=payload, headers=self.headers(),
                                              timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise network_error(exc, url=url, provider=self.name, model=model,
                                secrets=self._secrets) from exc
        if not response.is_success:
            raise self._status_error(response.status_code, response.headers, response.text, model)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise malformed_error("the body was not a JSON object", provider=self.name,
                                  model=model)
        return data

    async def stream_lines(self, response: httpx.Response, model: str) -> AsyncIterator[str]:
        """``response``'s lines; after the first, each within ``stream_idle_s`` or the stream
        is stalled (``stalled_error``, retryable). The first may take the request's timeout (a
        long prompt is read before anything is sent)."""
        lines = response.aiter_lines()
        idle = self.stream_idle_s
        first = True
        while True:
            try:
                if first or not idle:
                    line = await anext(lines)
                else:
                    async with asyncio.timeout(idle):  # in this task: no task per line
                        line = await anext(lines)
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise stalled_error(provider=self.name, model=model, idle_s=idle or 0) from exc
            first = False
            yield line

    @asynccontextmanager
    async def open_stream(self, url: str, payload: dict[str, Any],
                          model: str) -> AsyncIterator[httpx.Response]:
        """The streaming response, closed when the block ends, is cancelled, or is abandoned."""
        try:
            async with self.client.stream("POST", url, json=payload, headers=self.headers(),
                                          timeout=self.timeout) as response:
                if not response.is_success:
                    body = (await response.aread()).decode("utf-8", "replace")
                    raise self._status_error(response.status_code, response.headers, body, model)
                yield response
        except httpx.HTTPError as exc:
            raise network_error(exc, url=url, provider=self.name, model=model,
                                secrets=self._secrets) from exc

    def _status_error(self, status: int, headers: Mapping[str, str], body: str,
                      model: str) -> ProviderError:
        return status_error(status, headers, body, provider=self.name, model=model,
                            secrets=self._secrets)

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None
