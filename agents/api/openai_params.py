"""The model parameters of a ``POST /v1/chat/completions`` request: each one honoured, as the
turn's overrides of the agent's settings (``agents.turns.builder.turn_overrides_apply``), or
refused with a 400 naming it — never silently ignored.

A parameter the agent's provider cannot send on (Anthropic has no ``seed``) is refused as well,
naming it; ``response_format`` is the exception: a provider that does not take it is asked for
it in the prompt, and the answer is checked either way (``agents.turns.answer_format``). Fields of OpenAI's protocol that
ask for something agentsite does not do (``logprobs``, ``logit_bias``, audio …) are refused when
they ask for it, accepted when they hold their default (``logprobs: false``); a field OpenAI's
protocol does not have is refused.
"""

from __future__ import annotations

import json
from typing import Any

from agents.api.errors import ApiError
from agents.api.openai_schemas import ChatCompletionIn
from agents.models import Agent
from agents.runtime.providers import get_provider_class
from agents.turns.answer_format import format_problem

MAX_STOP_SEQUENCES = 4

# Fields of OpenAI's request that agentsite does not do, and what a caller reads when one asks
# for it (any value but None, false, an empty one or the default named).
UNSUPPORTED = {
    "logprobs": "Log probabilities are not returned: leave out logprobs (or send false).",
    "top_logprobs": "Log probabilities are not returned: leave out top_logprobs.",
    "logit_bias": "logit_bias is not supported: leave it out.",
    "functions": "The agent's own tools run on the server; a request cannot add functions of "
                 "its own. Configure tools on the agent instead.",
    "function_call": "The agent's own tools run on the server; a request cannot ask for a "
                     "function call.",
    "audio": "Audio output is not supported: leave out audio.",
    "prediction": "Predicted outputs are not supported: leave out prediction.",
    "web_search_options": "Web search is not a request option: give the agent a search tool "
                          "instead.",
    "reasoning_effort": "reasoning_effort is not supported yet: leave it out.",
    "verbosity": "verbosity is not supported: leave it out.",
    "metadata": "Request metadata is not kept: leave out metadata.",
    "prompt_cache_key": "prompt_cache_key is not supported: leave it out.",
    "safety_identifier": "safety_identifier is not supported: send the end user as user.",
}
# Their values that ask for nothing beyond what agentsite does.
DEFAULTS: dict[str, tuple[Any, ...]] = {
    "modalities": (["text"], []),
    "service_tier": ("auto", "default", ""),
    "tool_choice": ("auto", "none", ""),
}
ALSO_UNSUPPORTED = {
    "modalities": "Only text is answered: send modalities [\"text\"] or leave it out.",
    "service_tier": "Service tiers are not supported: leave out service_tier.",
    "tool_choice": "The request has no tools of its own to choose from (the agent's tools run "
                   "on the server): send tool_choice \"auto\" or leave it out.",
}
# Accepted whatever their value: ``parallel_tool_calls`` concerns a request's own tools, which it
# has none of; ``store``: every request is recorded as a trace either way (it is how a turn is
# kept), and a stateless request's conversation stays out of the chat's lists.
NO_EFFECT = frozenset({"parallel_tool_calls", "store"})


def _asks(value: Any) -> bool:
    return value not in (None, False, "", [], {})


def _unsupported(name: str, value: Any) -> str | None:
    """What a caller reads for the field ``name`` sent as ``value``; None when it is accepted."""
    if name in NO_EFFECT or value is None:
        return None
    if name in DEFAULTS:
        return None if value in DEFAULTS[name] else ALSO_UNSUPPORTED[name]
    if not _asks(value):
        return None
    if name in UNSUPPORTED:
        return UNSUPPORTED[name]
    return (f"{name!r} is not a field of the chat completions request agentsite knows; leave it "
            "out (docs: “What happens to each request field”).")


def response_format_of(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``response_format`` to send on to the model: None for text."""
    kind = (value or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = value.get("json_schema") if value else None
        if not isinstance(spec, dict) or not spec.get("name") or not isinstance(
                spec.get("schema", {}), dict):
            raise ApiError(400, "response_format json_schema needs a json_schema object with a "
                                "name and a schema.", param="response_format.json_schema")
        return format_checked({"type": "json_schema", "json_schema": spec},
                              param="response_format.json_schema.schema")
    raise ApiError(400, f"response_format type {kind!r} is not one of text, json_object, "
                        "json_schema.", param="response_format.type")


def format_checked(response_format: dict[str, Any], *, param: str) -> dict[str, Any]:
    """``response_format`` when its schema can be checked, else a 400 on ``param``."""
    problem = format_problem(response_format)
    if problem is not None:
        raise ApiError(400, problem, param=param, code="invalid_schema")
    return response_format


def _stop(value: str | list[str] | None) -> list[str] | None:
    stops = [value] if isinstance(value, str) else list(value or [])
    stops = [s for s in stops if s]
    if len(stops) > MAX_STOP_SEQUENCES:
        raise ApiError(400, f"Up to {MAX_STOP_SEQUENCES} stop sequences may be sent.",
                       param="stop")
    return stops or None


def fields_sent(raw: bytes) -> dict[str, Any]:
    """The request's JSON object as sent: the schema keeps only the fields it declares."""
    try:
        sent = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return sent if isinstance(sent, dict) else {}


def chat_overrides(body: ChatCompletionIn, agent: Agent, sent: dict[str, Any]) -> dict[str, Any]:
    """The request's model parameters as the turn's overrides (named as
    ``agents.runtime.providers.base.REQUEST_PARAMS`` names them), or an ``ApiError`` (400)
    naming the first field that cannot be honoured for ``agent``. ``sent``: the request's JSON
    object as sent (``fields_sent``), for the fields the schema does not declare."""
    extra = {k: v for k, v in sent.items() if k not in ChatCompletionIn.model_fields}
    for name, value in extra.items():
        problem = _unsupported(name, value)
        if problem:
            raise ApiError(400, problem, param=name, code="unsupported_parameter")
    for name in ("logprobs", "top_logprobs", "tool_choice"):
        problem = _unsupported(name, getattr(body, name))
        if problem:
            raise ApiError(400, problem, param=name, code="unsupported_parameter")
    if (body.max_tokens is not None and body.max_completion_tokens is not None
            and body.max_tokens != body.max_completion_tokens):
        raise ApiError(400, "max_tokens and max_completion_tokens disagree; send one of them.",
                       param="max_completion_tokens")
    sent = {  # request field -> (ChatRequest field, value)
        "max_completion_tokens": ("max_tokens", body.max_completion_tokens),
        "max_tokens": ("max_tokens", body.max_tokens),
        "temperature": ("temperature", body.temperature),
        "top_p": ("top_p", body.top_p),
        "stop": ("stop", _stop(body.stop)),
        "seed": ("seed", body.seed),
        "presence_penalty": ("presence_penalty", body.presence_penalty),
        "frequency_penalty": ("frequency_penalty", body.frequency_penalty),
        "response_format": ("response_format", response_format_of(body.response_format)),
    }
    return overrides_for(agent, sent)


def overrides_for(agent: Agent, sent: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """The turn's overrides from ``sent`` (request field -> (``ChatRequest`` field, value; None
    for not sent)), or an ``ApiError`` (400) naming the first field ``agent``'s provider does not
    take."""
    taken = _params_of(agent)
    overrides: dict[str, Any] = {}
    for field, (param, value) in sent.items():
        if value is None:
            continue
        if not agent.allow_request_params and param != "response_format":
            raise ApiError(400, f"The agent {agent.slug!r} does not let callers set {field}: its "
                                "own settings apply. Leave it out.", param=field,
                           code="parameter_not_allowed")
        # A format the provider does not take is asked for in the prompt; the answer is
        # checked either way (``agents.turns.answer_format``).
        if taken is not None and param not in taken and param != "response_format":
            raise ApiError(400, _not_taken(agent, field), param=field,
                           code="unsupported_parameter")
        overrides[param] = value
    return overrides


def _params_of(agent: Agent) -> frozenset[str] | None:
    """The request parameters the agent's provider sends on; None when it has no provider
    (its turn says so itself)."""
    provider = agent.provider if agent.provider_id else None
    if provider is None:
        return None
    try:
        return get_provider_class(provider.kind).request_params
    except ValueError:
        return None


def _not_taken(agent: Agent, field: str) -> str:
    kind = agent.provider.get_kind_display()
    return (f"The agent {agent.slug!r} answers with a model of the provider kind {kind}, which "
            f"does not take {field}; leave it out.")
