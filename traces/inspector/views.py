from __future__ import annotations

import functools
import json
from typing import Any

from django.contrib import messages as flash
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.functional import SimpleLazyObject
from django.views.decorators.http import require_GET, require_POST

from agentsite.access import get_for_team_or_404, team_required
from agentsite.fragments import kept_key
from agentsite.models import Membership
from agentsite.redirects import redirect_back

from ..export.records import trace_export_chunks
from ..models import Step, StepPayload, Trace
from ..record import live, selectors
from ..record.feedback import feedback_set
from ..record.presentation import (
    TREE_MAX_STEPS,
    decorate_states,
    decorate_steps,
    readable_payload,
    timeline_scale,
    turn_tree,
)

LIST_PAGE_SIZE = 25


def _trace(request: HttpRequest, trace_uuid) -> Trace:
    """A trace the person may see (every one of the team for admins; else those of their own
    and of shared conversations); 404 otherwise."""
    return selectors.page_trace_or_404(request.membership, trace_uuid)


@team_required()
@require_GET
def trace_list(request: HttpRequest) -> HttpResponse:
    filters, errors = selectors.TraceFilters.from_query(request.GET)
    paginator = Paginator(selectors.trace_list_pages(membership=request.membership, filters=filters),
                          LIST_PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    rows = list(page.object_list)
    for t in rows:  # what a row shows: a finished one is kept rendered (agentsite.fragments)
        t.row_key = kept_key(
            t.pk, t.created_at, t.status, t.model, t.duration_ms, t.iterations,
            t.total_tokens, t.estimated_calls, t.cost_usd, t.agent.name if t.agent else None,
            t.user.get_username() if t.user else None,
            t.user_message.text if t.user_message else None, running=t.is_active)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "page": page,
        "traces": rows,
        "filters": filters,
        "errors": errors,
        "choices": selectors.trace_filter_choices(team=request.team),
        "query": query.urlencode(),
        "sees_every_trace": selectors.sees_every_trace(request.membership),
        "admin_notice": selectors.ADMIN_NOTICE,
    }
    template = "traces/trace_list.html#results" if request.htmx and request.htmx.target == "results" else "traces/trace_list.html"
    return render(request, template, context)


def _trace_with_flags(request: HttpRequest, trace_uuid) -> Trace:
    """``_trace``, with whether it has failovers, forks and ratings to show (``has_retries``,
    ``has_forks``, ``has_feedback``): most traces have none, and the page then does not read
    them."""
    return selectors.page_trace_or_404(request.membership, trace_uuid, flags=True)


@team_required()
@require_GET
def trace_detail(request: HttpRequest, trace_uuid) -> HttpResponse:
    trace = _trace_with_flags(request, trace_uuid)
    steps, more_after = _timeline(trace)
    states, states_before = _trajectory(trace)
    context = {
        "trace": trace,
        "can_act": selectors.trace_can_act(request.membership, trace),
        "admin_notice": selectors.ADMIN_NOTICE if selectors.sees_every_trace(request.membership) else "",
        "steps": steps,
        "more_after": more_after,
        "steps_key": steps_key(trace),
        "states": states,
        "states_before": states_before,
        "feedback": list(trace.feedback.select_related("user")) if trace.has_feedback else [],
        "streaming": selectors.streaming_text(trace) if trace.is_active else None,
    }
    context["mine"] = next((f for f in context["feedback"] if f.user_id == request.user.pk), None)
    return render(request, "traces/trace_detail.html", context)


def steps_key(trace: Trace) -> str | None:
    """What a finished trace's timeline and trajectory show, for the page's ``{% cache %}`` of
    them (``agentsite.fragments``): once a trace has ended its steps and states only change
    with a re-pricing (its cost) or a late event. Its rows carry no form and nothing of the reader, so every
    reader allowed to see the trace may be served the same copy."""
    return kept_key(trace.pk, trace.event_seq, trace.step_count, trace.cost_usd, trace.duration_ms,
                    running=trace.is_active)


def _timeline(trace: Trace) -> tuple[Any, Any]:
    """The timeline's first chunk and the seq to load more after (None: no more), read only
    when the page renders them: a kept timeline (``steps_key``) is not read at all."""

    @functools.cache
    def read() -> tuple[list[Step], int | None]:
        steps = selectors.trace_steps(trace)
        decorate_steps(steps, scale=timeline_scale(trace))
        return steps, steps[-1].seq if len(steps) == selectors.STEP_CHUNK else None

    return SimpleLazyObject(lambda: read()[0]), SimpleLazyObject(lambda: read()[1])


def _trajectory(trace: Trace) -> tuple[Any, Any]:
    """The trajectory's last states and the iteration to load earlier ones before (None: no
    earlier ones), read only when the page renders them: a finished trace's are kept with its
    timeline (``steps_key``)."""

    @functools.cache
    def read() -> tuple[list[Any], int | None]:
        states, previous = selectors.trace_states(trace)
        return decorate_states(states, trace=trace, previous=previous), (
            states[0].iteration if previous else None)

    return SimpleLazyObject(lambda: read()[0]), SimpleLazyObject(lambda: read()[1])


@team_required(Membership.Role.MEMBER, action="rate answers")
@require_POST
def trace_feedback(request: HttpRequest, trace_uuid) -> HttpResponse:
    """Thumbs up or down on an answer, with an optional comment (``rating`` empty: take it back).
    From the chat (htmx: the buttons come back) or the inspector."""
    trace = _trace(request, trace_uuid)
    error = ""
    try:
        feedback_set(trace=trace, membership=request.membership,
                     rating=request.POST.get("rating", ""), comment=request.POST.get("comment", ""))
    except ValidationError as exc:
        error = " ".join(exc.messages)
    if request.htmx:
        mine = trace.feedback.filter(user=request.user).first()
        return render(request, "traces/_feedback.html", {"trace": trace, "mine": mine, "error": error},
                      status=422 if error else 200)
    if error:
        flash.error(request, error)
    return redirect_back(request, reverse("trace_detail", args=[trace.uuid]))


@team_required()
@require_GET
def trace_partial(request: HttpRequest, trace_uuid) -> JsonResponse:
    """The text a running model request (``?step=``) has streamed so far, as the worker last
    saved it: what a page that missed live frames fills the gap with."""
    trace = _trace(request, trace_uuid)
    try:
        seq = int(request.GET.get("step", ""))
    except ValueError:
        return JsonResponse({"error": "Give the step number: ?step=3."}, status=400)
    payload = (StepPayload.objects.filter(step__trace=trace, step__seq=seq, kind=StepPayload.Kind.PARTIAL)
               .values_list("content", flat=True).first())
    step = trace.steps.filter(seq=seq).values_list("status", flat=True).first()
    if step is None:
        return JsonResponse({"error": "No such step."}, status=404)
    return JsonResponse({"step": seq, "text": payload or "", "running": step == Step.Status.RUNNING})


@team_required()
@require_GET
def trace_tree(request: HttpRequest, trace_uuid) -> HttpResponse:
    """The turn as a tree of spans (iterations, requests, approval waits, parallel calls): a
    part of the trace page, which a link or a reload opened on its own lands on."""
    trace = _trace(request, trace_uuid)
    if not request.htmx:
        return redirect(reverse("trace_detail", args=[trace.uuid]) + "#turn-tree")
    steps = list(trace.steps.only(*selectors.STEP_COLUMNS).order_by("seq")[:TREE_MAX_STEPS])
    return render(request, "traces/trace_detail.html#tree",
                  {"trace": trace, "rows": turn_tree(trace, steps), "clipped": len(steps) == TREE_MAX_STEPS})


@team_required()
@require_GET
def trace_states_chunk(request: HttpRequest, trace_uuid) -> HttpResponse:
    """Earlier trajectory states of a long trace."""
    trace = _trace(request, trace_uuid)
    try:
        before = int(request.GET.get("before", "0"))
    except ValueError:
        before = 0
    states, previous = selectors.trace_states(trace, before=before)
    context = {"trace": trace, "states": decorate_states(states, trace=trace, previous=previous),
               "states_before": states[0].iteration if previous else None}
    return render(request, "traces/trace_detail.html#state-chunk", context)


@team_required()
@require_GET
def trace_steps_chunk(request: HttpRequest, trace_uuid) -> HttpResponse:
    """The next chunk of a long timeline (loaded as the reader scrolls)."""
    trace = _trace(request, trace_uuid)
    try:
        after = max(int(request.GET.get("after", "0")), 0)
    except ValueError:
        after = 0
    steps = selectors.trace_steps(trace, after_seq=after)
    decorate_steps(steps, scale=timeline_scale(trace))
    context = {"trace": trace, "steps": steps, "more_after": steps[-1].seq if len(steps) == selectors.STEP_CHUNK else None}
    return render(request, "traces/trace_detail.html#step-chunk", context)


@team_required()
@require_GET
def trace_changes(request: HttpRequest, trace_uuid) -> JsonResponse:
    """Everything after event ``since``, as the same fragments the live events carry."""
    trace = _trace(request, trace_uuid)
    try:
        since = max(int(request.GET.get("since", "0")), 0)
    except ValueError:
        since = 0
    steps, states = selectors.trace_changes(trace, since=since)
    if steps is None:
        # Too much to patch in place: the page reloads from the database instead.
        return JsonResponse({"seq": trace.event_seq, "status": trace.status, "reload": True, "events": []})
    decorate_steps(steps, scale=timeline_scale(trace))
    events = [live.trace_payload(trace)]
    events += [live.step_payload(step) for step in steps]
    events += [live.state_payload(state) for state in decorate_states(states, trace=trace)]
    return JsonResponse({"seq": trace.event_seq, "status": trace.status, "events": events})


def _step(request: HttpRequest, trace_uuid, seq: int) -> Step:
    trace = _trace(request, trace_uuid)
    step = get_for_team_or_404(Step.objects.all(), request.team, field="trace__team", trace=trace, seq=seq)
    step.trace = trace
    return step


@team_required()
@require_GET
def step_detail(request: HttpRequest, trace_uuid, seq: int) -> HttpResponse:
    """An opened step: its facts and payloads (large ones shown in part, with a download)."""
    step = _step(request, trace_uuid, seq)
    decorate_steps([step], scale=1.0)
    payloads = []
    for payload in selectors.step_payloads(step):
        text = _pretty(payload)
        readable = None
        if payload.content_type == "application/json" and payload.kind in ("request", "response", "message"):
            try:
                readable = readable_payload(payload.kind, json.loads(payload.content))
            except ValueError:
                readable = None
        payloads.append(
            {
                "kind": payload.kind,
                "label": payload.get_kind_display(),
                "size": payload.size or len(payload.content),
                "text": text[: selectors.PAYLOAD_PREVIEW_CHARS],
                "truncated": len(text) > selectors.PAYLOAD_PREVIEW_CHARS,
                "readable": readable,
            }
        )
    return render(request, "traces/trace_detail.html#step-detail", {"step": step, "trace": step.trace, "payloads": payloads})


def _pretty(payload: StepPayload) -> str:
    if payload.content_type == "application/json":
        try:
            return json.dumps(json.loads(payload.content), indent=2, ensure_ascii=False)
        except ValueError:
            return payload.content
    return payload.content


@team_required()
@require_GET
def step_payload_download(request: HttpRequest, trace_uuid, seq: int, kind: str) -> HttpResponse:
    step = _step(request, trace_uuid, seq)
    payload = get_for_team_or_404(StepPayload.objects.all(), request.team, field="step__trace__team", step=step, kind=kind)
    is_json = payload.content_type == "application/json"
    response = HttpResponse(_pretty(payload), content_type="application/json" if is_json else "text/plain; charset=utf-8")
    name = f"trace-{step.trace.uuid.hex[:8]}-step-{step.seq}-{payload.kind}.{'json' if is_json else 'txt'}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@team_required()
@require_GET
def trace_export(request: HttpRequest, trace_uuid) -> StreamingHttpResponse:
    """The whole trace as JSON: skeleton, states and every payload, streamed step by step."""
    trace = _trace(request, trace_uuid)
    response = StreamingHttpResponse(trace_export_chunks(trace), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="trace-{trace.uuid}.json"'
    return response

