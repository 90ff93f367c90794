"""Model Context Protocol servers as a source of tools.

``client``: plain async code around the official SDK (discover a server's tools, call one);
``transport``: the SDK's HTTP client behind the platform's outbound-network policy;
``endpoints``: a ``McpServer`` row as something to connect to (stdio commands come only from
the operator's ``settings.MCP_STDIO_SERVERS``); ``services``: discovery and the sync of a
server's Tool rows; ``tool``: the runtime tool of one MCP tool; ``admin``: the admin pages.
"""
