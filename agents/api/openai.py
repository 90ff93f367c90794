"""OpenAI's Chat Completions protocol in front of a team's agents: ``POST /v1/chat/completions``
and ``GET /v1/models``, for any OpenAI client pointed at ``<site>/v1`` with a team API key.

``model`` is an agent's slug (``<slug>/<model>`` picks one of the agent's allowed models). Each
request is a turn like any other: queued for a worker, traced, priced, held to the budgets and
rate limits, with the agent's tools run server-side (an "ask" tool waits for a person in the chat,
the inspector or the REST API, then times out as a denial; a stream tells the wait as a chunk with
an empty delta and an ``agentsite.approval`` field). The answer is the turn's final answer.

Continuity: by default a request is stateless, as with OpenAI: the messages it sends are the
history (stored as a conversation of its own, left out of the chat's lists, kept for its trace).
With ``X-Agentsite-Conversation: <id>`` the last user message is sent into that stored
conversation instead, which keeps its own history (the request's earlier messages are then not
used). Every answer names its trace and conversation in the ``X-Agentsite-Trace-Id`` and
``X-Agentsite-Conversation-Id`` headers and in the ``agentsite`` field.

Trace context: a W3C ``traceparent`` header (and its ``tracestate``) makes the turn part of the
caller's trace (``agents.api.trace_context``); an invalid one is ignored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import reverse
from ninja import Router

from agents.api.auth import scope_check
from agents.api.errors import TYPES, ApiError, errors
from agents.api.openai_schemas import ChatCompletion, ChatCompletionIn, ModelCard, ModelList
from agents.api.openai_start import (
    Prepared,
    Started,
    agent_for,
    chat_commit,
    chat_prepare,
    chat_prepare_commit,
    turn_stop,
)
from agents.api.turn_stream import (
    TurnTimeout,
    trace_events,
    trace_listening,
    turn_wait,
    with_keepalive,
)
from agents.models import Agent, Message
from agentsite.db import db_async
from agentsite.models import ApiKey
from traces.json_values import usd
from traces.models import Trace

logger = logging.getLogger(__name__)
router = Router(tags=["OpenAI-compatible"])
Scope = ApiKey.Scope
# Beyond the agent's hard time limit, time for the queue and the worker's start.
WAIT_MARGIN_S = 60
ERRORS = errors(400, 404, 409, 429, 502, 503, 504)


# -- the model list -------------------------------------------------------------------------------
@router.get("/v1/models", response={200: ModelList, **ERRORS}, summary="List the agents a key may call")
def models_list(request: HttpRequest) -> dict[str, Any]:
    caller = scope_check(request, Scope.CHAT)
    agents = Agent.objects.filter(team=caller.team).order_by("name")
    return {"object": "list", "data": [_model_card(a, caller.team.name) for a in agents]}


@router.get("/v1/models/{path:model}", response={200: ModelCard, **ERRORS},
            summary="Read one agent a key may call")
def models_retrieve(request: HttpRequest, model: str) -> dict[str, Any]:
    """``model`` as a request names it: an agent's slug, or ``<slug>/<model>`` for one of the
    models the agent may use (then ``id`` is that name)."""
    caller = scope_check(request, Scope.CHAT)
    agent, _override = agent_for(caller.team, model)
    return {**_model_card(agent, caller.team.name), "id": model.strip() if "/" in model else agent.slug}


def _model_card(agent: Agent, owner: str) -> dict[str, Any]:
    return {"id": agent.slug, "created": int(agent.created_at.timestamp()), "owned_by": owner,
            "name": agent.name, "description": agent.description, "models": agent.model_choices()}


# -- the answer ----------------------------------------------------------------------------------
def _finish_reason(trace: Trace) -> str:
    if hasattr(trace, "answer_outcome"):  # read with the trace (``turn_stream``)
        outcome = trace.answer_outcome
    else:
        outcome = (Message.objects.filter(trace=trace, role=Message.Role.ASSISTANT).order_by("-id")
                   .values_list("outcome", flat=True).first())
    return {"length": "length", "filtered": "content_filter"}.get(outcome or "", "stop")


def _usage(trace: Trace) -> dict[str, Any]:
    return {"prompt_tokens": trace.prompt_tokens, "completion_tokens": trace.output_tokens,
            "total_tokens": trace.total_tokens,
            "prompt_tokens_details": {"cached_tokens": trace.cache_read_tokens,
                                      "cache_creation_tokens": trace.cache_write_tokens},
            "completion_tokens_details": {"reasoning_tokens": trace.reasoning_tokens}}


def trace_ref(request: HttpRequest, trace: Trace) -> dict[str, Any]:
    return {"trace_id": trace.uuid.hex,
            "trace_url": request.build_absolute_uri(reverse("trace_detail", args=[trace.uuid])),
            "conversation_id": trace.conversation.uuid.hex, "status": trace.status,
            "cost_usd": usd(trace.cost_usd), "iterations": trace.iterations}


def turn_error(trace: Trace) -> tuple[int, str, str]:
    """(status, message, code) for a turn that did not complete."""
    message = trace.error or f"The turn ended {trace.get_status_display().lower()}."
    if trace.status == Trace.Status.TIMED_OUT:
        return 504, message, "turn_timed_out"
    if trace.status in (Trace.Status.CANCELLED, Trace.Status.INTERRUPTED):
        return 409, message, "turn_cancelled"
    if trace.error_kind == "budget":
        return 429, message, "budget_exceeded"
    return 502, message, trace.error_kind or "turn_failed"


def turn_headers(response: HttpResponse, prepared: Prepared) -> HttpResponse:
    response["X-Agentsite-Trace-Id"] = prepared.trace_uuid.hex
    response["X-Agentsite-Conversation-Id"] = prepared.conversation_uuid.hex
    return response


def error_body(status: int, message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": TYPES.get(status, "api_error"), "param": None,
                      "code": code}}


def completion_body(request: HttpRequest, started: Started, trace: Trace) -> dict[str, Any]:
    return {"id": f"chatcmpl-{trace.uuid.hex}", "object": "chat.completion",
            "created": int(trace.created_at.timestamp()), "model": started.model,
            "choices": [{"index": 0, "finish_reason": _finish_reason(trace), "logprobs": None,
                         "message": {"role": "assistant", "content": trace.answer, "refusal": None}}],
            "usage": _usage(trace), "system_fingerprint": None,
            "agentsite": trace_ref(request, trace)}


@router.post("/v1/chat/completions", response={200: ChatCompletion, **ERRORS},
             summary="Send a conversation to an agent and get its answer (OpenAI's protocol)",
             openapi_extra={"responses": {200: {
                 "description": ("The completion (application/json), or with `stream: true` its "
                                 "chunks as server-sent events (text/event-stream) ending with "
                                 "`data: [DONE]`."),
                 "content": {"text/event-stream": {"schema": {"type": "string"}}}}}})
async def chat_completions(request: HttpRequest, body: ChatCompletionIn) -> HttpResponse:
    if body.stream:
        prepared = await db_async(chat_prepare)(request, body)
        # The answer starts now; the turn is stored and queued by the stream itself, so the
        # first byte never waits for the database's write lock behind a burst of requests.
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return event_stream(_stream(request, prepared, timeout_s=prepared.agent.hard_time_limit_s + WAIT_MARGIN_S,
                                    include_usage=include_usage), prepared)
    # Checked, stored and queued in one trip to the database thread.
    prepared, started = await db_async(chat_prepare_commit)(request, body)

    async def answer(started: Started, trace: Trace) -> dict[str, Any]:
        # The trace was read with its conversation and its answer's outcome: no query here.
        return completion_body(request, started, trace)

    return await turn_answered(prepared, timeout_s=prepared.agent.hard_time_limit_s + WAIT_MARGIN_S,
                               body_of=answer, started=started)


def event_stream(events: AsyncIterator[bytes], prepared: Prepared) -> HttpResponse:
    """A streamed answer's response, with the turn's headers."""
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return turn_headers(response, prepared)


async def turn_answered(prepared: Prepared, *, timeout_s: float,
                        body_of: Callable[[Started, Trace], Awaitable[dict[str, Any]]],
                        started: Started | None = None) -> HttpResponse:
    """Store and queue the prepared turn (unless it was: ``started``), wait for its end, and
    answer ``body_of`` its trace when it completed, else its error (504 when it ran out of time
    and was stopped). A turn that ran is never to be sent again: its errors say
    ``X-Should-Retry: false``."""
    if started is None:
        started = await db_async(chat_commit)(prepared)
    try:
        trace = await turn_wait(started.trace, timeout_s=timeout_s, fresh=True)
    except TurnTimeout:
        trace = None
    except asyncio.CancelledError:
        await db_async(turn_stop)(started.trace, prepared.caller.membership)
        raise
    if trace is None:
        await db_async(turn_stop)(started.trace, prepared.caller.membership)
        status, message, code = 504, "The turn did not end in time and was stopped.", "turn_timed_out"
    elif trace.status != Trace.Status.COMPLETED:
        status, message, code = turn_error(trace)
    else:
        return turn_headers(JsonResponse(await body_of(started, trace)), prepared)
    response = JsonResponse(error_body(status, message, code), status=status)
    # The turn ran (its tools may have acted): OpenAI's clients must not send it again.
    response["X-Should-Retry"] = "false"
    return turn_headers(response, prepared)


# -- streaming -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamFailed:
    """Why a streamed turn ends without its end: it could not be stored, or it ran out of time
    (and was stopped)."""

    status: int
    message: str
    code: str


async def turn_followed(prepared: Prepared, *, timeout_s: float
                        ) -> AsyncIterator[dict[str, Any] | StreamFailed | None]:
    """Store and queue the prepared turn, then follow it: ``{"event": "stored", "trace"}``, its
    live payloads (``turn_stream.trace_events``; None when quiet for a while, for a keepalive),
    and its ``end``; or one ``StreamFailed``. Subscribed before the turn is stored, so nothing of
    it is missed. A client that goes away (the stream closed) stops the turn too, instead of
    letting it run on unseen."""
    async with trace_listening(prepared.trace_uuid) as listener:
        try:
            trace = (await db_async(chat_commit)(prepared)).trace
        except ApiError as exc:
            yield StreamFailed(exc.status, exc.message, exc.code or "invalid_request")
            return
        except DatabaseError:
            logger.exception("a streamed request's turn could not be stored")
            yield StreamFailed(503, "The turn could not be stored; nothing was started. Try again.",
                               "storage_unavailable")
            return
        membership = prepared.caller.membership
        yield {"event": "stored", "trace": trace}
        try:
            async with aclosing(with_keepalive(trace_events(trace, timeout_s=timeout_s,
                                                            listener=listener))) as stream:
                async for payload in stream:
                    yield payload
        except TurnTimeout:
            await db_async(turn_stop)(trace, membership)
            yield StreamFailed(504, "The turn did not end in time and was stopped.", "turn_timed_out")
        except (asyncio.CancelledError, GeneratorExit):
            await asyncio.shield(db_async(turn_stop)(trace, membership))
            raise
def sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def frame_text(sent: dict[int, int], payload: dict[str, Any]) -> tuple[int, str]:
    """A ``delta`` frame's model step and its text not sent yet, by what ``sent`` (step ->
    characters sent, which this updates) holds: a frame delivered twice gives nothing new."""
    step, offset, text = int(payload.get("step") or 0), int(payload.get("offset") or 0), payload.get("text") or ""
    have = sent.get(step, 0)
    if offset + len(text) <= have:
        return step, ""
    text = text[max(have - offset, 0):]
    sent[step] = offset + len(text) if offset > have else have + len(text)
    return step, text


class _Text:
    """What has been streamed, per model step: frames the page already has (same offset) are
    skipped, and a step's text after another step's is set apart by a blank line."""

    def __init__(self) -> None:
        self.sent: dict[int, int] = {}
        self.last_step: int | None = None
        self.streamed = False
        # The text of the step streamed last (the answer so far).
        self.step_text = ""

    def take(self, payload: dict[str, Any]) -> str:
        step, text = frame_text(self.sent, payload)
        if not text:
            return ""
        if step != self.last_step:
            self.step_text = ""
            if self.streamed:
                self.step_text, text = text, "\n\n" + text
            else:
                self.step_text = text
        else:
            self.step_text += text
        self.last_step = step
        self.streamed = True
        return text

    def restart(self, step: int) -> None:
        """The model request ``step`` starts over (a retry after a cut-off stream, a resumed
        turn): what it streamed is void and cannot be taken back, so its new text follows after a
        blank line instead of being spliced onto the old."""
        if self.sent.pop(step, 0):
            self.last_step = -1


def approval_ref(request: HttpRequest, payload: dict[str, Any]) -> dict[str, Any]:
    """A call waiting for approval, as a chunk's ``agentsite`` field: ``{"trace_id",
    "approval": {"call_id", "tool", "arguments", "waiting_since", "expires_at", "timeout_s",
    "decide_url"}}`` (``POST`` ``{"approved": …, "reason": …}`` there with the same key)."""
    approval = {k: v for k, v in payload.items() if k not in ("event", "trace")}
    path = approval.get("decide_url")
    approval["decide_url"] = request.build_absolute_uri(path) if path else None
    return {"trace_id": payload.get("trace"), "approval": approval}


async def _stream(request: HttpRequest, prepared: Prepared, *, timeout_s: float,
                  include_usage: bool) -> AsyncIterator[bytes]:
    head = {"id": f"chatcmpl-{prepared.trace_uuid.hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": prepared.model, "system_fingerprint": None}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        return sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                          "logprobs": None}], **extra})

    yield chunk({"role": "assistant", "content": ""})
    text = _Text()
    ended = None
    async with aclosing(turn_followed(prepared, timeout_s=timeout_s)) as followed:
        async for payload in followed:
            if isinstance(payload, StreamFailed):
                yield sse(error_body(payload.status, payload.message, payload.code))
                return
            event = payload.get("event") if payload is not None else "quiet"
            if event == "quiet":
                yield b": waiting\n\n"  # a comment: OpenAI's clients skip it
            elif event == "delta":
                piece = text.take(payload)
                if piece:
                    yield chunk({"content": piece})
            elif event == "step" and payload.get("restarted_step") is not None:
                text.restart(int(payload["restarted_step"]))
            elif event == "approval":
                # An empty delta: a client that does not know the field reads nothing.
                yield chunk({}, agentsite=approval_ref(request, payload))
            elif event == "end":
                ended = payload["trace"]
    assert ended is not None
    if ended.status != Trace.Status.COMPLETED:
        status, message, code = turn_error(ended)
        yield sse(error_body(status, message, code))
        return
    answer = ended.answer or ""
    so_far = text.step_text
    if not text.streamed:
        if answer:
            yield chunk({"content": answer})
    elif answer.startswith(so_far) and len(answer) > len(so_far):
        yield chunk({"content": answer[len(so_far):]})
    # The trace was read with its conversation and its answer's outcome: no query here.
    yield chunk({}, _finish_reason(ended))
    if include_usage:
        extra = trace_ref(request, ended)
        yield sse({**head, "choices": [], "usage": _usage(ended), "agentsite": extra})
    yield sse("[DONE]")

