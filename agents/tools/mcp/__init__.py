"""Model Context Protocol servers as a source of tools.

``client``: plain async code around the official SDK (discover a server's tools, call one),
with ``connection`` (connecting, and what its failures mean), ``pool`` (the connections the
calls of one event loop share) and ``host`` (the stdio servers a process keeps across turns); ``transport``: the SDK's HTTP client behind the platform's
outbound-network policy;
``endpoints``: a ``McpServer`` row as something to connect to (stdio commands come only from
the operator's ``settings.MCP_STDIO_SERVERS``); ``services``: discovery and the sync of a
server's Tool rows; ``tool``: the runtime tool of one MCP tool; ``admin``: the admin pages; ``types``: the plain
data they exchange. Servers that need sign-in: ``oauth`` (a call's OAuth, the SDK's provider
over the stored sign-in), ``sign_in`` (signing in, out and back), ``credentials`` (what is
stored of it, without the SDK) and ``views`` (the pages). ``watch``: listening to servers that
announce their changes. Only ``client`` and the modules it uses, and ``sign_in``, import the
SDK, and only when a call, a discovery or a sign-in first needs it.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

CLIENT = "agents.tools.mcp.client"
SIGN_IN = "agents.tools.mcp.sign_in"
POOL = "agents.tools.mcp.pool"
HOST = "agents.tools.mcp.host"


def sdk_client() -> ModuleType:
    """``client``, the module of the package that imports the SDK (with ``connection`` and
    ``pool``, which only it imports). Importing ``mcp`` takes over a second, and every process
    imports the registry and the admin at start (web, worker, every manage.py command), most
    of them never to make an MCP call; so the registry's tools,
    the admin's discovery and the turn builder reach the client through here, and the SDK is
    loaded by the first call or discovery of a process. It is the package's only deferred
    import: a sibling, not a higher room (LAYOUT.md's rule is about those)."""
    return importlib.import_module(CLIENT)


def sdk_sign_in() -> ModuleType:
    """``sign_in`` (signing in to a server that needs it), which imports the SDK: reached
    through here, like ``client``, so the pages that only link to it do not load the SDK."""
    return importlib.import_module(SIGN_IN)


async def mcp_connections_close() -> None:
    """Close the MCP connections the running event loop kept (a turn's, a "Try it"'s; a stdio
    server's process ends here). Nothing to do, and nothing imported, in a process that has
    made no MCP call: the SDK is loaded by the first one (``client``, which imports ``pool``)."""
    pool = sys.modules.get(POOL)
    if pool is not None:
        await pool.close_connections()


def mcp_servers_stop() -> None:
    """Stop the stdio servers this process kept across turns (``host``): at the worker's
    shutdown. Nothing to do in a process that started none."""
    host = sys.modules.get(HOST)
    if host is not None:
        host.host_stop()
