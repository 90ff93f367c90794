"""The MCP SDK's HTTP client behind the outbound-network policy.

The SDK speaks ``httpx2``; the policy (``agentsite.outbound.GuardedTransport``) is an ``httpx``
transport. ``GuardedBridge`` is an ``httpx2`` transport that hands every request to a
``GuardedTransport`` and streams the answer back, so each connection the SDK makes (the POSTs,
the GET stream, the DELETE that ends a session) has its host resolved once, every address
vetted and the connection pinned to a vetted address. It also remembers the last refusal or
network failure (the SDK may report it only as a lost connection) and the session id the
server handed out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2

from agentsite.outbound.transport import GuardedTransport, OutboundBlocked

SESSION_HEADER = "mcp-session-id"


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: httpx.Response, bridge: GuardedBridge) -> None:
        self._response = response
        self._bridge = bridge

    async def __aiter__(self) -> AsyncIterator[bytes]:
        stream = self._response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        try:
            async for chunk in stream:
                yield chunk
        except httpx.TimeoutException as exc:
            self._bridge.failure = f"reading the answer timed out ({exc or 'no data'})"
            raise httpx2.ReadTimeout(str(exc)) from exc
        except httpx.HTTPError as exc:
            self._bridge.failure = f"reading the answer failed ({exc})"
            raise httpx2.ReadError(str(exc)) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class GuardedBridge(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self._inner = inner or GuardedTransport()
        self.refused: str | None = None
        self.failure: str | None = None
        self.session_id: str | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()  # JSON-RPC messages: small, and sent whole
        extensions: dict[str, Any] = {}
        if "timeout" in request.extensions:
            extensions["timeout"] = request.extensions["timeout"]
        outgoing = httpx.Request(request.method, str(request.url),
                                 headers=list(request.headers.multi_items()), content=body,
                                 extensions=extensions)
        try:
            response = await self._inner.handle_async_request(outgoing)
        except OutboundBlocked as exc:
            self.refused = str(exc)
            raise httpx2.UnsupportedProtocol(str(exc)) from exc
        except httpx.TimeoutException as exc:
            self.failure = f"the connection timed out ({exc or 'no answer'})"
            raise httpx2.ConnectTimeout(str(exc)) from exc
        except httpx.HTTPError as exc:
            self.failure = f"the connection failed ({exc})"
            raise httpx2.ConnectError(str(exc)) from exc
        session_id = response.headers.get(SESSION_HEADER)
        if session_id:
            self.session_id = session_id
        return httpx2.Response(response.status_code, headers=list(response.headers.multi_items()),
                               stream=_Body(response, self), extensions=dict(response.extensions))

    async def aclose(self) -> None:
        await self._inner.aclose()
