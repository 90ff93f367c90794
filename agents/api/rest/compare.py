"""``GET /api/v1/traces/compare?a=&b=``: two traces aligned step by step, their first
divergence, totals and answers (``traces.debug.compare``), the facts of the compare page. Scope
``traces:read``; both traces must be ones the key's person may see (else a 404).

Registered on the traces router by ``register`` before ``/{trace_id}``, which would otherwise
take ``compare`` for an id."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Router, Schema

from agents.api.auth import scope_check
from agents.api.errors import ApiError, errors
from agents.api.rest.common import is_uuid
from agentsite.models import ApiKey
from traces.debug.compare import TotalRow, divergence_facts
from traces.debug.compare_selectors import trace_comparison
from traces.json_values import usd
from traces.models import Trace
from traces.record.selectors import trace_get_or_404


class ComparedTrace(Schema):
    id: str
    status: str
    model: str
    provider: str
    agent: str | None
    agent_version: int | None
    answer: str
    inspector_url: str


class DivergenceOut(Schema):
    position: int = Field(description="The aligned position (1-based) of the first difference.")
    a_seq: int | None = Field(description="The step of run A there (null: only run B has one).")
    b_seq: int | None = Field(description="The step of run B there (null: only run A has one).")
    what: str = Field(description="What differs: kind, name, model, status, request, response, message, "
                                  "arguments, output, a_only or b_only.")
    detail: str
    summary: str = Field(description="One sentence, as the page shows it.")


class AlignedStep(Schema):
    position: int
    a: int | None = Field(description="Run A's step number (null: none at this position).")
    b: int | None
    state: str = Field(description="same (contents equal), differs, a_only, b_only, or matched: same kind, "
                                   "name and arguments after the first divergence (contents not compared).")


class TotalOut(Schema):
    key: str
    label: str
    a: Any
    b: Any
    difference: Any


class ToolCount(Schema):
    name: str
    a: int
    b: int


class DiffPart(Schema):
    op: str = Field(description="equal, delete (only in A) or insert (only in B).")
    text: str


class AnswersOut(Schema):
    same: bool
    a: str
    b: str
    diff: list[DiffPart]


class ComparisonOut(Schema):
    a: ComparedTrace
    b: ComparedTrace
    compare_url: str
    first_divergence: DivergenceOut | None
    aligned_by_position: bool = Field(description="Part of the runs was too long to align and was paired "
                                                  "by position.")
    steps: list[AlignedStep]
    totals: list[TotalOut]
    tools: list[ToolCount]
    answers: AnswersOut


def _trace(request: HttpRequest, value: str, param: str) -> Trace:
    if not is_uuid(value):
        raise ApiError(400, f"Give a trace id as {param}.", param=param, code="invalid_value")
    return trace_get_or_404(request.membership, Trace.objects.select_related("agent"), uuid=value)


def _trace_out(request: HttpRequest, trace: Trace) -> dict[str, Any]:
    return {"id": str(trace.uuid), "status": trace.status, "model": trace.model, "provider": trace.provider_name,
            "agent": trace.agent.name if trace.agent else None, "agent_version": trace.agent_version,
            "answer": trace.answer,
            "inspector_url": request.build_absolute_uri(reverse("trace_detail", args=[trace.uuid]))}


def _total(row: TotalRow) -> dict[str, Any]:
    if row.key == "cost_usd":
        return {"key": row.key, "label": row.label, "a": usd(row.a), "b": usd(row.b),
                "difference": usd(row.difference)}
    return {"key": row.key, "label": row.label, "a": row.a, "b": row.b, "difference": row.difference}


def trace_compare_api(request: HttpRequest, a: str, b: str) -> dict[str, Any]:
    """Two traces aligned step by step: the first step where they differ (and how, in words),
    every aligned position's state, totals side by side, tools used and the answers' word diff.
    Scope `traces:read`."""
    scope_check(request, ApiKey.Scope.TRACES)
    ta, tb = _trace(request, a, "a"), _trace(request, b, "b")
    result = trace_comparison(ta, tb)
    return {
        "a": _trace_out(request, ta), "b": _trace_out(request, tb),
        "compare_url": request.build_absolute_uri(f"{reverse('trace_compare')}?a={ta.uuid}&b={tb.uuid}"),
        "first_divergence": divergence_facts(result.divergence),
        "aligned_by_position": result.by_position,
        "steps": [{"position": p.position, "a": p.a.seq if p.a else None, "b": p.b.seq if p.b else None,
                   "state": p.state} for p in result.pairs],
        "totals": [_total(row) for row in result.totals],
        "tools": [{"name": row.label, "a": row.a, "b": row.b} for row in result.tools],
        "answers": {"same": result.answers_same, "a": ta.answer, "b": tb.answer,
                    "diff": [{"op": op, "text": text} for op, text in result.answer_diff]},
    }


def register(router: Router) -> None:
    router.get("/compare", response={200: ComparisonOut, **errors(400, 404)}, summary="Compare two traces",
               url_name="rest_trace_compare")(trace_compare_api)
