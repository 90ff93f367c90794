"""One tool of an MCP server as the runtime sees it.

The model calls it by its prefixed name (``<server>_<tool>``); the call goes to the server
under the tool's own name, on the turn's kept connection to the server (``client.call_tool``),
bounded by the server's ``timeout_s`` and cut at its ``max_result_bytes``. A result the server
marks ``isError`` is a failed result the model reads; a server that cannot be reached or
answers nonsense raises ``ToolError``. Every result carries ``meta["mcp"]`` for the trace step. A server that lists resources has one more tool,
``<server>_resources_read`` (remote name ``READ_RESOURCE``): its call reads the resource at the
``uri`` it is given (``resources/read``), under the same policy as the server's other tools.

Trace context. While a turn that is traced runs the tool, the ``tools/call`` request carries
the call's W3C ``traceparent`` (``agents.runtime.tracecontext``), and the caller's ``tracestate``
when the turn came with one, in its ``params._meta``, as ``{"traceparent": "00-…",
"tracestate": "…"}``: MCP's place for trace context, which the SDK's servers read to
parent their spans (``client`` runs the SDK's own OpenTelemetry propagation under it).
"""

from __future__ import annotations

from typing import Any

from agents.runtime.tools import Tool, ToolResult
from agents.runtime.tracecontext import current_trace_context

from . import sdk_client
from .types import READ_RESOURCE, Endpoint


class McpTool(Tool):
    def __init__(self, *, name: str, description: str, parameters: dict[str, Any],
                 endpoint: Endpoint, remote_name: str, timeout_s: float, max_bytes: int,
                 idempotent: bool = False) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters
        self.endpoint = endpoint
        self.remote_name = remote_name
        self.timeout_s = timeout_s  # the loop allows this much (plus a grace) per call
        self.max_bytes = max_bytes
        self.idempotent = idempotent

    tool_type = "extension"

    def step_meta(self) -> dict[str, Any]:
        reads = self.remote_name == READ_RESOURCE
        return {"tool_type": self.tool_type, "mcp": {
            "server": self.endpoint.name, "tool": self.remote_name,
            "transport": self.endpoint.transport, "method": READ_RESOURCE if reads else "tools/call"}}

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        context = current_trace_context()
        if self.remote_name == READ_RESOURCE:
            uri = arguments.get("uri")
            if not isinstance(uri, str) or not uri.strip():
                return ToolResult(False, "Give the URI of the resource to read, as “uri”.",
                                  error="no resource URI", meta=self.step_meta())
            result = await sdk_client().read_resource(
                self.endpoint, uri.strip(), timeout_s=self.timeout_s, max_bytes=self.max_bytes,
                meta=context or None)
        else:
            result = await sdk_client().call_tool(
                self.endpoint, self.remote_name, arguments, timeout_s=self.timeout_s,
                max_bytes=self.max_bytes, meta=context or None)
        meta = self.step_meta()
        meta["mcp"].update(protocol_version=result.protocol_version, session_id=result.session_id,
                           is_error=result.is_error)
        if result.is_error:
            return ToolResult(False, result.text,
                              error=result.text or f"The tool “{self.remote_name}” failed.",
                              meta=meta)
        return ToolResult(True, result.text, meta=meta)
