"""OpenAI's Responses protocol in front of a team's agents: ``POST /v1/responses`` (whole or
streamed with its typed events), ``GET`` and ``DELETE /v1/responses/{id}``, and
``POST /v1/responses/{id}/cancel`` (stops the turn), for any OpenAI client, openai-agents among
them, pointed at ``<site>/v1`` with a team API key.

A response is a turn like a chat completion's (``agents.api.openai``): queued for a worker,
traced, priced, held to the budgets and rate limits, with the agent's tools run on the server
and shown as ``mcp_call`` output items (``agents.api.responses_output``). Without
``previous_response_id`` the input is the history, stored as a conversation of its own;
with it, the new message continues that response's conversation from that turn. A streamed
response tells a call waiting for a person's approval as an ``mcp_call`` item added with its
``approval_request_id`` and an ``agentsite.approval`` field (where to decide it, until when).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from ninja import Router

from agents.api.auth import scope_check
from agents.api.errors import ApiError, errors
from agents.api.openai import (
    WAIT_MARGIN_S,
    StreamFailed,
    approval_ref,
    event_stream,
    frame_text,
    sse,
    turn_answered,
    turn_followed,
)
from agents.api.openai_start import Prepared, Started, turn_stop
from agents.api.responses_output import (
    SERVER_LABEL,
    call_item,
    input_items,
    message_item,
    response_body,
    response_fields,
)
from agents.api.responses_request import response_prepare, stored_response
from agents.api.responses_schemas import (
    ResponseDeleted,
    ResponseIn,
    ResponseInputItems,
    ResponseObject,
)
from agents.turns.tool_cards import card_steps, tool_cards
from agentsite.db import db_async, rereading
from agentsite.models import ApiKey
from traces.models import Step, Trace

logger = logging.getLogger(__name__)
router = Router(tags=["OpenAI-compatible"])
Scope = ApiKey.Scope
ERRORS = errors(400, 404, 409, 429, 502, 503, 504)
TOOL_ENDED = frozenset({Step.Status.OK, Step.Status.ERROR, "denied", "timeout", "cancelled"})


@router.post("/v1/responses", response={200: ResponseObject, **ERRORS},
             summary="Send input to an agent and get its response (OpenAI's Responses protocol)",
             openapi_extra={"responses": {200: {
                 "description": ("The response (application/json), or with `stream: true` its "
                                 "typed events as server-sent events (text/event-stream), from "
                                 "`response.created` to `response.completed`."),
                 "content": {"text/event-stream": {"schema": {"type": "string"}}}}}})
async def responses_create(request: HttpRequest, body: ResponseIn) -> HttpResponse:
    prepared = await db_async(response_prepare)(request, body)
    timeout = prepared.agent.hard_time_limit_s + WAIT_MARGIN_S
    if body.stream:
        return event_stream(_stream(request, prepared, timeout_s=timeout), prepared)

    async def answer(started: Started, trace: Trace) -> dict[str, Any]:
        return await db_async(response_body)(request, trace, outcome=trace.answer_outcome)

    return await turn_answered(prepared, timeout_s=timeout, body_of=answer)


def _read(request: HttpRequest, response_id_: str) -> Trace:
    caller = scope_check(request, Scope.CHAT)
    return stored_response(caller, response_id_)


@router.get("/v1/responses/{response_id}", response={200: ResponseObject, **errors(400, 404)},
            summary="Read a stored response (also while its turn runs)")
def responses_retrieve(request: HttpRequest, response_id: str) -> dict[str, Any]:
    if request.GET.get("stream", "").lower() in ("true", "1"):
        raise ApiError(400, "A stored response cannot be streamed again: read it whole, or follow "
                            "its turn at GET /api/v1/traces/{trace}/events.", param="stream")
    return response_body(request, _read(request, response_id))


@router.get("/v1/responses/{response_id}/input_items", response={200: ResponseInputItems, **errors(400, 404)},
            summary="List what a stored response was given")
def responses_input_items(request: HttpRequest, response_id: str, order: str = "desc",
                          limit: int = 20, after: str = "") -> dict[str, Any]:
    """The person's message and, for a stateless request's first response, the history it sent;
    newest first unless ``order=asc``; ``limit`` (1-100) items after the item ``after``."""
    if order not in ("asc", "desc"):
        raise ApiError(400, "order is asc or desc.", param="order")
    if not 1 <= limit <= 100:
        raise ApiError(400, "limit is between 1 and 100.", param="limit")
    items = input_items(_read(request, response_id))
    if order == "desc":
        items.reverse()
    if after:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise ApiError(400, f"{after[:80]!r} is not an input item of this response.", param="after")
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit}


@router.delete("/v1/responses/{response_id}", response={200: ResponseDeleted, **errors(404)},
               summary="Delete a stored response")
def responses_delete(request: HttpRequest, response_id: str) -> dict[str, Any]:
    """The response can no longer be read or continued through this API. Its turn stays in the
    team's record (its trace, its costs) as every turn's does, until its conversation is deleted."""
    trace = _read(request, response_id)
    with transaction.atomic():
        trace = Trace.objects.select_for_update().get(pk=trace.pk)
        meta = dict(trace.meta or {})
        meta["response"] = {**(meta.get("response") or {}), "deleted": True}
        Trace.objects.filter(pk=trace.pk).update(meta=meta)
    return {"id": response_id.strip(), "object": "response.deleted", "deleted": True}


@router.post("/v1/responses/{response_id}/cancel", response={200: ResponseObject, **errors(404)},
             summary="Stop a response's turn")
def responses_cancel(request: HttpRequest, response_id: str) -> dict[str, Any]:
    """Stops the turn when it is still queued or running (the key's person must be allowed to
    stop it, as in the chat); answers the response as it stands."""
    trace = _read(request, response_id)
    turn_stop(trace, request.membership)
    return response_body(request, Trace.objects.select_related("conversation").get(pk=trace.pk))


# -- streaming ------------------------------------------------------------------------------------
class _Events:
    """The typed events of one streamed response, numbered, and the output items told so far."""

    def __init__(self, trace_uuid: Any) -> None:
        self.trace_uuid = trace_uuid
        self.seq = 0
        self.items = 0  # output items added
        self.texts = 0  # message items added
        self.open: tuple[int, int, str, str] | None = None  # (step, index, item id, text)
        self.calls: dict[str, tuple[int, bool]] = {}  # call id -> (index, done)
        self.sent: dict[int, int] = {}

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\n".encode() + sse(data)

    def text(self, step: int, piece: str) -> list[bytes]:
        out = []
        if self.open is not None and self.open[0] != step:
            out += self.close_text()
        if self.open is None:
            index, n = self.items, self.texts
            self.items += 1
            self.texts += 1
            item = message_item(self.trace_uuid, n, "", status="in_progress")
            item["content"] = []
            self.open = (step, index, item["id"], "")
            out.append(self.event("response.output_item.added", output_index=index, item=item))
            out.append(self.event("response.content_part.added", item_id=item["id"],
                                  output_index=index, content_index=0,
                                  part={"type": "output_text", "text": "", "annotations": []}))
        step_, index, item_id, text = self.open
        self.open = (step_, index, item_id, text + piece)
        out.append(self.event("response.output_text.delta", item_id=item_id, output_index=index,
                              content_index=0, delta=piece, logprobs=[]))
        return out

    def close_text(self) -> list[bytes]:
        if self.open is None:
            return []
        _, index, item_id, text = self.open
        self.open = None
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        item = message_item(self.trace_uuid, int(item_id.rsplit("_", 1)[1]), text)
        return [self.event("response.output_text.done", item_id=item_id, output_index=index,
                           content_index=0, text=text, logprobs=[]),
                self.event("response.content_part.done", item_id=item_id, output_index=index,
                           content_index=0, part=part),
                self.event("response.output_item.done", output_index=index, item=item)]

    def call(self, item: dict[str, Any], *, extra: dict[str, Any] | None = None) -> list[bytes]:
        """A tool call's item: added once (in progress), done once it has ended."""
        call_id = item["id"].removeprefix("mcp_")
        out = []
        index, done = self.calls.get(call_id, (None, False))
        if done:
            return []
        if index is None:
            out += self.close_text()
            index = self.items
            self.items += 1
            added = {**item, "status": "in_progress", "output": None, "error": None}
            out.append(self.event("response.output_item.added", output_index=index, item=added,
                                  **({"agentsite": extra} if extra else {})))
            out.append(self.event("response.mcp_call.in_progress", item_id=item["id"],
                                  output_index=index))
        ended = item["status"] in ("completed", "failed")
        self.calls[call_id] = (index, ended)
        if ended:
            out.append(self.event("response.mcp_call_arguments.done", item_id=item["id"],
                                  output_index=index, arguments=item["arguments"]))
            out.append(self.event(f"response.mcp_call.{item['status']}", item_id=item["id"],
                                  output_index=index))
            out.append(self.event("response.output_item.done", output_index=index, item=item))
        return out


@db_async
@rereading
def _calls(trace: Trace) -> list[dict[str, Any]]:
    """The turn's tool calls as ``mcp_call`` items, from its tool cards (one query)."""
    steps, arguments = card_steps([trace.pk], arguments_chars=None)
    cards = tool_cards(steps, arguments, {trace.pk: trace.uuid})
    return [call_item(card.call_id, card.name, card.arguments_json or "{}", card=card)
            for card in sorted(cards.values(), key=lambda c: c.seq)]


_final = db_async(rereading(response_body))


async def _stream(request: HttpRequest, prepared: Prepared, *, timeout_s: float) -> AsyncIterator[bytes]:
    events = _Events(prepared.trace_uuid)
    head = response_fields(prepared.meta.get("response") or {}, response_uuid=prepared.trace_uuid,
                           created_at=int(time.time()), model=prepared.model,
                           overrides=prepared.overrides, end_user=prepared.end_user)
    yield events.event("response.created", response=head)
    ended = None
    async with aclosing(turn_followed(prepared, timeout_s=timeout_s)) as followed:
        async for payload in followed:
            if isinstance(payload, StreamFailed):
                yield events.event("error", code=payload.code, message=payload.message, param=None)
                return
            event = payload.get("event") if payload is not None else "quiet"
            if event == "quiet":
                yield b": waiting\n\n"
            elif event == "stored":
                trace = payload["trace"]
                yield events.event("response.in_progress", response={**head, "status": "in_progress"})
            elif event == "delta":
                step, piece = frame_text(events.sent, payload)
                for chunk in events.text(step, piece) if piece else ():
                    yield chunk
            elif event == "step" and payload.get("restarted_step") is not None:
                # A model request that starts over: its new text is a new item.
                events.sent.pop(int(payload["restarted_step"]), None)
                for chunk in events.close_text():
                    yield chunk
            elif event == "approval":
                item = call_item(payload["call_id"], payload.get("tool") or "",
                                 payload.get("arguments") or {}, card=None)
                item.update(status="in_progress", output=None, approval_request_id=payload["call_id"])
                for chunk in events.call(item, extra=approval_ref(request, payload)):
                    yield chunk
            elif (event == "step" and payload.get("kind") == Step.Kind.TOOL_CALL
                  and payload.get("status") in TOOL_ENDED):
                for item in await _calls(trace):
                    for chunk in events.call(item):
                        yield chunk
            elif event == "end":
                ended = payload["trace"]
    assert ended is not None
    final = await _final(request, ended, outcome=getattr(ended, "answer_outcome", None))
    for chunk in _settle(events, final):
        yield chunk
    kind = {"completed": "response.completed", "incomplete": "response.incomplete",
            "cancelled": "response.failed"}.get(final["status"], "response.failed")
    yield events.event(kind, response=final)


def _settle(events: _Events, final: dict[str, Any]) -> list[bytes]:
    """The rest of the answer and of the calls, from the response as stored: text the frames did
    not carry (a model that does not stream, a lost frame), then every item not yet done."""
    out: list[bytes] = []
    texts = [item for item in final["output"] if item["type"] == "message"]
    last = texts[-1]["content"][0]["text"] if texts else ""
    if events.open is not None:
        so_far = events.open[3]
        if last.startswith(so_far) and len(last) > len(so_far):
            out += events.text(events.open[0], last[len(so_far):])
        out += events.close_text()
    elif events.texts == 0:  # nothing streamed: every message, whole
        for n, item in enumerate(texts):
            out += events.text(-1 - n, item["content"][0]["text"])
        out += events.close_text()
    for item in final["output"]:
        if item["type"] == "mcp_call" and item.get("server_label") == SERVER_LABEL:
            out += events.call(item)
    return out

