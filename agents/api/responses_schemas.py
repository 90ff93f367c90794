"""The shapes of OpenAI's Responses protocol that agentsite speaks (the request, the response
object, a deleted response), as schemas so that they appear in the API's OpenAPI document."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field

from agents.api.openai_schemas import TraceRef


class ResponseIn(Schema):
    """OpenAI's ``POST /v1/responses`` request. ``model`` is an agent's slug (or
    ``<slug>/<model>``); the agent's own system prompt, tools and settings apply. Every field is
    honoured or refused with a 400 naming it (``agents.api.responses_request``)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="An agent's slug, or <slug>/<model> for one of its allowed models.")
    input: str | list[dict[str, Any]] = Field(
        description="The person's message as text, or a list of input items: messages (roles "
                    "user, assistant, system, developer; text content) and the agent's own "
                    "earlier output items (messages, mcp_call), as a client sends its history back.")
    instructions: str | None = Field(None, description="The caller's instructions, given to the "
                                                       "agent with the message (its system prompt stays).")
    previous_response_id: str | None = Field(
        None, description="Continue from this stored response: its conversation, from that turn "
                          "(an earlier one starts a branch).")
    stream: bool = False
    store: bool | None = Field(None, description="false: the response cannot be retrieved or "
                                                 "continued through this API (the team's trace of "
                                                 "the turn is kept as for every turn).")
    max_output_tokens: int | None = Field(None, ge=1, description="Caps each answer of the model, in tokens.")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    text: dict[str, Any] | None = Field(
        None, description='{"format": {"type": "text" | "json_object" | "json_schema", …}}: JSON '
                          "for agents on an OpenAI-compatible provider, which takes it natively.")
    user: str | None = Field(None, description="The end user of the key's application it is for.")
    safety_identifier: str | None = Field(None, description="The same as user.")
    metadata: dict[str, str] | None = Field(None, description="Up to 16 pairs kept with the response.")
    tools: list[dict[str, Any]] | None = Field(None, description="Must be empty: the agent's own tools run "
                                                                 "on the server.")
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    include: list[str] | None = Field(None, description="Must be empty: nothing optional is returned.")
    truncation: str | None = Field(None, description='"disabled" or "auto": the agent\'s own history '
                                                     "settings decide what a long conversation keeps.")


class ResponseUsage(Schema):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


class ResponseObject(Schema):
    """A response: the turn's output items (the agent's tool calls as ``mcp_call`` items with
    their results, its messages as ``message`` items), its status and usage, and ``agentsite``,
    where its trace is."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: str = Field(description="queued, in_progress, completed, incomplete, failed or cancelled.")
    error: dict[str, Any] | None
    incomplete_details: dict[str, Any] | None
    completed_at: int | None = None
    instructions: str | None
    model: str
    output: list[dict[str, Any]] = Field(description="message and mcp_call items, in order.")
    parallel_tool_calls: bool
    previous_response_id: str | None
    max_output_tokens: int | None
    temperature: float | None
    top_p: float | None
    text: dict[str, Any]
    tool_choice: str
    tools: list[dict[str, Any]]
    truncation: str
    store: bool
    metadata: dict[str, str]
    user: str | None = Field(description="The end user it is for.")
    safety_identifier: str | None = Field(description="The same as user.")
    usage: ResponseUsage | None
    agentsite: TraceRef


class ResponseDeleted(Schema):
    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool


class ResponseInputItems(Schema):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]] = Field(description="Input message items (input_text; a history's "
                                                   "assistant messages as output_text).")
    first_id: str | None
    last_id: str | None
    has_more: bool
