"""An MCP server written with the SDK whose one tool, ``request_meta``, answers with the
``params._meta`` of the ``tools/call`` request that called it (and the ``label`` it was given),
as JSON: served over Streamable HTTP by ``servers.running(build_meta_server()
.streamable_http_app())``, or over stdio by running this file (``python meta_server.py``)."""

from __future__ import annotations

import json

from mcp.server.mcpserver import Context, MCPServer


def build_meta_server() -> MCPServer:
    server = MCPServer("meta-server", version="1.0")

    @server.tool(description="Answers with the _meta of the request that called it.")
    def request_meta(ctx: Context, label: str = "") -> str:
        meta = dict(ctx.request_context.meta or {})
        return json.dumps({"label": label, "meta": meta}, default=str, sort_keys=True)

    return server


if __name__ == "__main__":
    build_meta_server().run("stdio")
