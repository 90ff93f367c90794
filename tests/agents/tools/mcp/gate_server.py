"""An MCP server written with the SDK, run over stdio by running this file: ``pid`` answers the
process's id, ``hold(seconds)`` waits that long and answers the most calls it has had in flight
at once so far."""

from __future__ import annotations

import asyncio
import os

from mcp.server.mcpserver import MCPServer


def build_gate_server() -> MCPServer:
    server = MCPServer("gate-server", version="1.0")
    state = {"in_flight": 0, "most": 0}

    @server.tool(description="The server process's id.")
    def pid() -> str:
        return str(os.getpid())

    @server.tool(description="Waits, then says how many calls were in flight at most.")
    async def hold(seconds: float = 0.2) -> str:
        state["in_flight"] += 1
        state["most"] = max(state["most"], state["in_flight"])
        try:
            await asyncio.sleep(seconds)
        finally:
            state["in_flight"] -= 1
        return str(state["most"])

    return server


if __name__ == "__main__":
    build_gate_server().run("stdio")
