"""The one API object: its authentication, its error shape and its routers."""

from __future__ import annotations

from ninja import NinjaAPI

from agents.api.auth import KeyAuth
from agents.api.errors import install_handlers

api = NinjaAPI(
    title="agentsite API",
    version="1",
    description=("Call a team's agents and read its traces and costs with a team API key "
                 "(`Authorization: Bearer ask_…`). `/v1/chat/completions` and `/v1/models` speak "
                 "OpenAI's protocol; everything else is under `/api/v1/`. Errors always have "
                 "OpenAI's shape: `{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`."),
    auth=KeyAuth(),
    urls_namespace="api",
    docs_url="api/v1/docs",
    openapi_url="api/v1/openapi.json",
)
install_handlers(api)
