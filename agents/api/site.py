"""The one API object: its authentication, its error shape and its routers."""

from __future__ import annotations

from ninja import NinjaAPI
from ninja.operation import Operation

from agents.api.auth import KeyAuth
from agents.api.errors import install_handlers
from agents.api.openai import router as openai_router
from agents.api.parser import SafeJsonParser
from agents.api.responses import router as responses_router
from agents.api.rest import agents as rest_agents
from agents.api.rest import approvals as rest_approvals
from agents.api.rest import conversations as rest_conversations
from agents.api.rest import costs as rest_costs
from agents.api.rest import events as rest_events
from agents.api.rest import fork as rest_fork
from agents.api.rest import prices as rest_prices
from agents.api.rest import traces as rest_traces


class AgentsiteApi(NinjaAPI):
    """Operation ids are the views' names (``trace_detail``, ``chat_completions``): what a client
    generated from the schema calls its methods."""

    def get_openapi_operation_id(self, operation: Operation) -> str:
        return operation.view_func.__name__.removesuffix("_api")


api = AgentsiteApi(
    title="agentsite API",
    version="1",
    description=("Call a team's agents and read its traces and costs with a team API key "
                 "(`Authorization: Bearer ask_…`). `/v1/chat/completions`, `/v1/responses` and `/v1/models` "
                 "speak OpenAI's protocols; everything else is under `/api/v1/`. Errors always have "
                 "OpenAI's shape: `{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`."),
    auth=KeyAuth(),
    urls_namespace="api",
    docs_url="api/v1/docs",
    openapi_url="api/v1/openapi.json",
    parser=SafeJsonParser(),
)
install_handlers(api)
api.add_router("", openai_router)
api.add_router("", responses_router)
api.add_router("api/v1/agents", rest_agents.router)
api.add_router("api/v1/conversations", rest_conversations.router)
api.add_router("api/v1/traces", rest_traces.router)
api.add_router("api/v1/traces", rest_events.router)
api.add_router("api/v1/traces", rest_fork.router)
api.add_router("api/v1/traces", rest_approvals.router)
api.add_router("api/v1/costs", rest_costs.router)
api.add_router("api/v1/prices", rest_prices.router)
