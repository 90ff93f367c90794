"""``POST /api/v1/traces/{id}/fork``: fork and replay a stored turn from one of its steps
(``agents.turns.fork``). Scope `chat`: it starts a turn, as sending a message does."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest
from django.urls import reverse
from ninja import Field, Router, Schema, Status

from agents.api.auth import scope_check
from agents.api.errors import errors
from agents.api.rest.common import is_uuid
from agents.turns.fork import fork_start
from agentsite.models import ApiKey
from traces.models import Trace
from traces.record.selectors import trace_get_or_404

router = Router(tags=["traces"])
Scope = ApiKey.Scope


class ForkIn(Schema):
    seq: int = Field(ge=1, description="The step to fork from: a model request (sent again), a "
                                       "tool call or an approval (made again from the record).")
    provider: str | None = Field(None, description="Another provider of the team, by name.")
    model: str | None = Field(None, description="One of the agent's models, or any model of "
                                                "`provider`.")
    agent_version: int | None = Field(None, description="Run the agent as this version recorded it.")
    system_prompt: str | None = Field(None, description="An edited system prompt.")
    message: str | None = Field(None, description="An edited message at the fork point.")
    allow_new_tool_calls: bool = Field(False, description="Run tool calls that were not recorded "
                                                          "(otherwise they are refused; recorded "
                                                          "ones are always replayed).")


class ForkOut(Schema):
    id: str = Field(description="The new trace's id.")
    forked_from: str
    fork_seq: int
    status: str
    trace_url: str
    inspector_url: str


@router.post("/{trace_id}/fork", response={202: ForkOut, **errors(400, 403, 404, 429)},
             summary="Fork a trace from a step")
def trace_fork_api(request: HttpRequest, trace_id: str, body: ForkIn) -> Status:
    """A new run that continues the trace from step `seq` with its recorded tool results
    replayed, queued like any turn; follow it at `trace_url`. Scope `chat`; not for a viewer,
    and only in a conversation the key's person may act in."""
    caller = scope_check(request, Scope.CHAT)
    if not is_uuid(trace_id):
        raise Http404
    trace = trace_get_or_404(caller.membership, Trace.objects.select_related(
        "agent", "conversation", "user_message"), uuid=trace_id)
    fork = fork_start(trace=trace, seq=body.seq, membership=caller.membership, provider=body.provider,
                      model=body.model, agent_version=body.agent_version,
                      system_prompt=body.system_prompt, message=body.message,
                      allow_new_tool_calls=body.allow_new_tool_calls)
    out: dict[str, Any] = {
        "id": str(fork.uuid), "forked_from": str(trace.uuid), "fork_seq": body.seq,
        "status": fork.status,
        "trace_url": request.build_absolute_uri(reverse("api:rest_trace_detail", args=[fork.uuid.hex])),
        "inspector_url": request.build_absolute_uri(reverse("trace_detail", args=[fork.uuid])),
    }
    return Status(202, out)
