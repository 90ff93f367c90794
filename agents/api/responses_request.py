"""Reading a ``POST /v1/responses`` request into a turn: its input items as the history and the
person's message, its fields as the turn's model parameters (each honoured or refused with a 400
naming it, as ``openai_params`` does for chat completions), and ``previous_response_id`` as the
stored conversation and the turn it continues. The turn is then admitted and stored as a chat
completion's is (``openai_start``).

A response is its turn's trace: ``resp_<trace id>``. What the Responses protocol has and a
trace does not (``instructions``, ``store``, ``metadata``, the ``text.format`` asked for, the
previous response) is kept in the trace's ``meta["response"]``.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest

from agents.access import chat_check, conversation_get_or_404
from agents.api.auth import scope_check
from agents.api.end_users import end_user_clean
from agents.api.errors import ApiError
from agents.api.openai_params import fields_sent, format_checked, overrides_for
from agents.api.openai_start import (
    Prepared,
    agent_for,
    conversation_for,
    history_and_last,
    turn_prepare,
)
from agents.api.responses_schemas import ResponseIn
from agents.team_config import team_config_read
from agentsite.api_keys import Caller
from agentsite.models import ApiKey
from traces.models import Trace

Scope = ApiKey.Scope
RESPONSE_PREFIX = "resp_"
METADATA_MAX_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512
INSTRUCTIONS_KEPT_CHARS = 32_000

# Fields of OpenAI's request agentsite does not do, refused when they ask for something.
UNSUPPORTED = {
    "background": "Background responses are not supported: leave out background (every turn "
                  "runs on a worker already; GET /v1/responses/{id} reads one while it runs).",
    "conversation": "Conversations of the Responses API are not supported: continue with "
                    "previous_response_id instead.",
    "prompt": "Stored prompts are not supported: send instructions instead.",
    "reasoning": "reasoning is not supported yet: leave it out.",
    "top_logprobs": "Log probabilities are not returned: leave out top_logprobs.",
    "max_tool_calls": "max_tool_calls is not supported: the agent's own iteration limit applies.",
    "prompt_cache_retention": "prompt_cache_retention is not supported: leave it out.",
    "context_management": "context_management is not supported: the agent's own history "
                          "settings apply.",
}
DEFAULTS: dict[str, tuple[Any, ...]] = {
    "service_tier": ("auto", "default", ""),
    "tool_choice": ("auto", "none", ""),
    "truncation": ("disabled", "auto", ""),
}
# Accepted whatever their value (a client sends them by default): no effect here.
NO_EFFECT = frozenset({"parallel_tool_calls", "prompt_cache_key", "stream_options",
                       "prompt_cache_options"})
# Input items a client sends back from an earlier output of the agent: its server-side calls,
# already part of the history the messages tell.
AGENT_ITEMS = frozenset({"mcp_call", "mcp_list_tools", "reasoning"})
TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def response_id(trace_uuid: uuid.UUID) -> str:
    return f"{RESPONSE_PREFIX}{trace_uuid.hex}"


def response_uuid(value: str, *, param: str | None = None) -> uuid.UUID:
    """The trace id a response id names; a malformed one is a 404 (400 with ``param``)."""
    raw = (value or "").strip()
    try:
        return uuid.UUID(raw.removeprefix(RESPONSE_PREFIX))
    except ValueError:
        status = 400 if param else 404
        raise ApiError(status, f"{raw[:80]!r} is not a response id (resp_…).", param=param,
                       code="response_not_found") from None


def _refused(name: str, message: str) -> ApiError:
    return ApiError(400, message, param=name, code="unsupported_parameter")


def _fields_check(body: ResponseIn, sent: dict[str, Any]) -> None:
    for name, value in sent.items():
        if name in ResponseIn.model_fields or name in NO_EFFECT or value in (None, False, "", [], {}):
            continue
        if name in DEFAULTS:
            continue
        raise _refused(name, UNSUPPORTED.get(name) or (
            f"{name!r} is not a field of the Responses request agentsite knows; leave it out "
            "(docs: “What happens to each request field”)."))
    for name in ("tool_choice", "truncation", "service_tier"):
        value = sent.get(name)
        if value is not None and value not in DEFAULTS[name]:
            raise _refused(name, f"{name} {value!r} is not supported: the agent's own tools and "
                                 "history settings apply; leave it out.")
    if body.tools:
        raise ApiError(400, "The agent's own tools run on the server; a request cannot add tools "
                            "of its own. Configure tools on the agent instead.", param="tools",
                       code="client_tools_unsupported")
    if body.include:
        raise _refused("include", "Nothing optional is returned (no log probabilities, no "
                                  "encrypted reasoning): send include [] or leave it out.")


def _item_text(item: dict[str, Any], index: int) -> str:
    content = item.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise ApiError(400, "A message's content is text or a list of text parts.",
                       param=f"input[{index}].content")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            texts.append(str(part.get("text") or ""))
        elif kind == "refusal":
            texts.append(str(part.get("refusal") or ""))
        else:
            raise ApiError(400, f"Content parts of type {kind!r} are not accepted; send text.",
                           param=f"input[{index}].content", code="unsupported_content")
    return "\n".join(texts)


def input_turns(body: ResponseIn) -> tuple[list[str], list[tuple[str, str]]]:
    """The caller's instructions (``instructions``, then system and developer messages) and the
    conversation's turns (role, text), from ``input``."""
    instructions = [body.instructions] if body.instructions else []
    if isinstance(body.input, str):
        return instructions, [("user", body.input)]
    turns: list[tuple[str, str]] = []
    for index, item in enumerate(body.input):
        kind = item.get("type") or "message"
        if kind in AGENT_ITEMS:
            continue
        if kind in ("mcp_approval_response", "mcp_approval_request"):
            raise ApiError(400, "Approvals are decided at the decide_url the stream announces "
                                "(POST /api/v1/traces/{trace}/approvals/{call_id}), not sent as "
                                "input.", param=f"input[{index}]", code="approval_via_rest")
        if kind != "message":
            code = "client_tools_unsupported" if "call" in kind else "unsupported_input_item"
            raise ApiError(400, f"Input items of type {kind!r} are not accepted: send messages "
                                "(the agent runs its own tools on the server).",
                           param=f"input[{index}]", code=code)
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise ApiError(400, f"A message's role is user, assistant, system or developer, not "
                                f"{role!r}.", param=f"input[{index}].role")
        text = _item_text(item, index)
        if role in ("system", "developer"):
            instructions.append(text)
        else:
            turns.append((role, text))
    return instructions, turns


def text_format_of(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """``text.format`` as the model request's ``response_format`` (None for text)."""
    if text is None:
        return None
    unknown = set(text) - {"format", "verbosity"}
    if unknown:
        raise _refused(f"text.{sorted(unknown)[0]}", "text takes format only.")
    if text.get("verbosity") not in (None, "medium"):
        raise _refused("text.verbosity", "text.verbosity is not supported: leave it out.")
    spec = text.get("format") or {"type": "text"}
    kind = spec.get("type", "text") if isinstance(spec, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        if not spec.get("name") or not isinstance(spec.get("schema"), dict):
            raise ApiError(400, "text.format json_schema needs a name and a schema object.",
                           param="text.format")
        schema = {k: spec[k] for k in ("name", "schema", "strict", "description") if k in spec}
        return format_checked({"type": "json_schema", "json_schema": schema},
                              param="text.format.schema")
    raise ApiError(400, f"text.format type {kind!r} is not one of text, json_object, json_schema.",
                   param="text.format.type")


def _metadata(value: dict[str, str] | None) -> dict[str, str]:
    value = value or {}
    if len(value) > METADATA_MAX_PAIRS or any(
            len(k) > METADATA_KEY_CHARS or len(str(v)) > METADATA_VALUE_CHARS for k, v in value.items()):
        raise ApiError(400, f"metadata holds up to {METADATA_MAX_PAIRS} pairs, keys up to "
                            f"{METADATA_KEY_CHARS} characters, values up to {METADATA_VALUE_CHARS}.",
                       param="metadata")
    return {str(k): str(v) for k, v in value.items()}


def _end_user(body: ResponseIn, caller: Caller) -> str:
    user = end_user_clean(body.user, param="user")
    safety = end_user_clean(body.safety_identifier, param="safety_identifier")
    if user and safety and user != safety:
        raise ApiError(400, "user and safety_identifier name different end users; send one.",
                       param="safety_identifier")
    return end_user_clean(user or safety, param="user", caller=caller)


def stored_response(caller: Caller, value: str, *, param: str | None = None) -> Trace:
    """The stored response ``value`` names, as a trace of the key's team in a conversation its
    person may see (any other, a deleted one, or one made with ``store: false`` is a 404)."""
    trace = (Trace.objects.select_related("conversation", "agent")
             .filter(uuid=response_uuid(value, param=param), team_id=caller.team.pk).first())
    kept = (trace.meta or {}).get("response", {}) if trace is not None else {}
    if trace is None or kept.get("deleted") or kept.get("store") is False:
        raise ApiError(404, f"No response {value.strip()[:80]!r} is stored for this key's team.",
                       param=param, code="response_not_found")
    conversation_get_or_404(caller.membership, pk=trace.conversation_id)
    return trace


def response_prepare(request: HttpRequest, body: ResponseIn) -> Prepared:
    """Everything that can refuse the request, before anything is written (as ``chat_prepare``)."""
    caller = scope_check(request, Scope.CHAT)
    with team_config_read(caller.team.pk):
        agent, override = agent_for(caller.team, body.model)
        _fields_check(body, fields_sent(request.body))
        response_format = text_format_of(body.text)
        overrides = overrides_for(agent, {
            "max_output_tokens": ("max_tokens", body.max_output_tokens),
            "temperature": ("temperature", body.temperature),
            "top_p": ("top_p", body.top_p),
            "text.format": ("response_format", response_format),
        })
        metadata = _metadata(body.metadata)
        chat_check(caller.membership)
        end_user = _end_user(body, caller)
        instructions, turns = input_turns(body)
        acting = parent = None
        if body.previous_response_id:
            parent = stored_response(caller, body.previous_response_id, param="previous_response_id")
            acting = conversation_for(caller, agent, end_user, pk=parent.conversation_id)
            if len(turns) > 1:
                raise ApiError(400, "With previous_response_id, send only the new message: the "
                                    "stored conversation keeps the history.", param="input")
        history, last = history_and_last(instructions, turns, param="input")
        meta = {"response": {
            "model": body.model, "store": body.store is not False,
            "instructions": (body.instructions or None) and body.instructions[:INSTRUCTIONS_KEPT_CHARS],
            "previous_response_id": body.previous_response_id and response_id(parent.uuid),
            "text_format": (body.text or {}).get("format") if response_format else None,
            "metadata": metadata}}
        return turn_prepare(request, caller, agent=agent, override=override, model=body.model,
                            history=history, last=last, acting=acting,
                            end_user=end_user, overrides=overrides, parent=parent, meta=meta)
