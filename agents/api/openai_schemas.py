"""The shapes of OpenAI's Chat Completions protocol that agentsite speaks (request, response,
stream chunk, model list), as schemas so that they appear in the API's OpenAPI document."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field


class ContentPart(Schema):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessageIn(Schema):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class StreamOptions(Schema):
    include_usage: bool = False


class ChatCompletionIn(Schema):
    """OpenAI's request. ``model`` is an agent's slug, or ``<slug>/<model>`` for one of the
    models the agent may switch to. The agent's own system prompt, tools and settings apply;
    the model parameters a request sets (``max_tokens``, ``temperature``, ``top_p``, ``stop``,
    ``seed``, the penalties) override the agent's for this turn when its provider takes them,
    and are refused with a 400 naming them when it does not; ``response_format`` is enforced
    for every provider (``agents.turns.answer_format``). Every other
    field is honoured or refused (``agents.api.openai_params``), never ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="An agent's slug, or <slug>/<model> for one of its allowed models.")
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None
    n: int | None = None
    user: str | None = None
    max_tokens: int | None = Field(None, ge=1, description="Caps each answer of the model, in tokens.")
    max_completion_tokens: int | None = Field(None, ge=1, description="The same as max_tokens.")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    stop: str | list[str] | None = Field(None, description="Up to 4 sequences that end the answer.")
    seed: int | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    response_format: dict[str, Any] | None = Field(
        None, description='{"type": "text"}, "json_object" or "json_schema": sent to the model when '
                          "its provider takes it, else asked for in the prompt; the answer is "
                          "checked, asked for once more if it fails, then an invalid_output error.")
    logprobs: bool | None = Field(None, description="Refused when true: not returned.")
    top_logprobs: int | None = Field(None, description="Refused: log probabilities are not returned.")
    tool_choice: str | dict[str, Any] | None = Field(
        None, description='"auto" or "none" only: a request has no tools of its own.')
    parallel_tool_calls: bool | None = Field(None, description="No effect: a request has no tools of its own.")


class Usage(Schema):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int]
    completion_tokens_details: dict[str, int]


class AssistantMessage(Schema):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None


class Choice(Schema):
    index: int = 0
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class TraceRef(Schema):
    """agentsite's own fields beside OpenAI's: where the turn's trace is, and what it cost."""

    trace_id: str
    trace_url: str
    conversation_id: str
    status: str
    cost_usd: str
    iterations: int


class ChatCompletion(Schema):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None
    agentsite: TraceRef


class ModelCard(Schema):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    name: str
    description: str
    models: list[str] = Field(description="The models this agent may use: its own first.")


class ModelList(Schema):
    object: Literal["list"] = "list"
    data: list[ModelCard]
