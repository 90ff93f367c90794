"""The REST API under ``/api/v1/``: one module per noun (agents, conversations, traces and
their live events, costs, prices), each a router that ``agents.api.site`` mounts. Every list is
paginated by cursor (``pagination``); every id is a public one (a UUID, or an agent's slug)."""
