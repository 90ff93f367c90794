"""What a stop cut: the cancellation audit of a cancelled, timed-out or interrupted turn.

Read from what the turn stored, nothing else: its trace row, its steps and their payloads, and
the messages it wrote to the conversation (read through the trace's reverse relation, so this
module imports nothing of ``agents`` but the runtime's constants). ``trace_audit`` returns a
plain JSON-able dict that the inspector's panel (``templates/traces/_audit.html``), the REST
API's trace detail and the JSON export all show:

* ``stop``: when the stop was asked for and by whom or what, when the turn ended, and how long
  the stop took;
* ``requests``: the model requests in flight, with the text they had streamed and their tokens
  (billed or estimated) and cost;
* ``tools``: calls that were abandoned, finished after the stop, or never started;
* ``approvals``: approvals withdrawn;
* ``synthetic``: the results written for calls left without one, so the history stays valid;
* ``after_stop``: whether anything ran after the stop, with the evidence, and what was checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max, Q

from agents.runtime.loop import CANCELLED_OUTPUT, INTERRUPTED_OUTPUT, RESUME_INTERRUPTED_OUTPUT

from ..json_values import iso as _iso
from ..json_values import usd as _usd
from ..models import Step, StepPayload, Trace

Status = Trace.Status
AUDITED = (Status.CANCELLED, Status.TIMED_OUT, Status.INTERRUPTED)
# The outputs the runtime and the reaper write for a call that has no real result.
SYNTHETIC_OUTPUTS = {
    CANCELLED_OUTPUT: "cancelled",
    INTERRUPTED_OUTPUT: "interrupted",
    RESUME_INTERRUPTED_OUTPUT: "not run again",
}
# How a step that a stop cut ends: the loop's "cancelled" (a call resumed after its worker
# died: "interrupted"), and by the start of its error, the end of a trace under a running step
# (``traces.record.services.STEP_INTERRUPTED``) and a resumed turn's cut-off request
# (``agents.turns.resume.CUT_OFF_ERROR``). Matched here rather than imported: the export, which
# includes the audit, is below the services (a test checks that they still match).
CUT_ERRORS = ("cancelled", "interrupted")
CUT_PREFIXES = ("Interrupted:", "Cut off:")
# The reason an approval step records when the turn stopped while it waited
# (``traces.record.step_values.APPROVAL_ERRORS``).
APPROVAL_WITHDRAWN_REASON = "cancelled"
# The streamed text shown in the panel (the step has all of it).
TEXT_PREVIEW_CHARS = 600
# Steps read at most: those of the last iteration and every one that ended cut, started after
# the stop or never ended (a stop cuts the end of a turn, never its middle).
MAX_STEPS = 500
STEP_FIELDS = ("id", "trace", "seq", "kind", "name", "iteration", "status", "success", "started_at",
               "duration_ms", "error", "provider", "model", "call_id", "cost_usd", "meta",
               "input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens",
               "reasoning_tokens")
USAGE = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "reasoning_tokens")


def trace_audit(trace: Trace, *, messages: Iterable[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The audit of ``trace``, or None when it did not end by a stop (cancelled, timed out or
    interrupted). ``messages`` (role, blocks) are the conversation messages the turn stored;
    read from the database when not given."""
    if trace.status not in AUDITED:
        return None
    stop = _stop(trace)
    steps = _steps(trace, stop["requested"] or stop["stopped"])
    payloads = _payloads(steps)
    if messages is None:
        messages = list(trace.messages.order_by("id").values("role", "blocks"))
    audit = {
        "status": trace.status,
        "status_label": trace.get_status_display(),
        "stop": _stop_out(stop),
        "requests": _requests(steps, payloads),
        "tools": _tools(steps, payloads, stop),
        "approvals": _approvals(steps),
        "synthetic": _synthetic(steps, payloads, list(messages)),
        "after_stop": _after_stop(trace, steps, stop),
    }
    audit["cut_count"] = sum(len(audit[k]) for k in ("requests", "tools", "approvals"))
    return audit


# -- the stop ---------------------------------------------------------------------------------------
def _stop(trace: Trace) -> dict[str, Any]:
    """When and by what the turn was stopped. ``requested``: the moment a stop was asked for (a
    person's cancel, a new message that interrupts) or the agent's time limit stopped the turn;
    None when nothing asked: a worker that died (the reaper ended the turn at ``stopped``), or a
    time limit of a turn stored before its moment was (``limit_at`` is when it fell due, about)."""
    agent = trace.agent if trace.agent_id else None
    kind, by, limit_at = "cancelled", "", None
    if trace.status == Status.TIMED_OUT:
        hard = trace.error_kind == "hard_time_limit"
        kind = "hard_time_limit" if hard else "time_limit"
        seconds = (agent.hard_time_limit_s if hard else agent.turn_time_limit_s) if agent else None
        by = ("the reaper: the turn ran past its hard time limit" if hard else "the agent's time limit")
        by += f" of {seconds} s" if seconds else ""
        if trace.started_at and seconds and trace.cancel_requested_at is None:
            limit_at = trace.started_at + timedelta(seconds=seconds)
    elif trace.status == Status.INTERRUPTED:
        kind = trace.error_kind or "interrupted"
        worker = f"worker {trace.worker}" if trace.worker else "the worker"
        by = f"the reaper: {worker} stopped running the turn"
    else:
        reason = (trace.cancel_reason or "").strip()
        by = reason[len("cancelled by "):] if reason.lower().startswith("cancelled by ") else reason
        by = by or "a cancel request"
    return {"kind": kind, "by": by, "reason": trace.cancel_reason or "", "error": trace.error,
            "requested": trace.cancel_requested_at, "limit_at": limit_at, "stopped": trace.finished_at,
            "last_heartbeat": trace.heartbeat_at, "worker": trace.worker}


def _stop_out(stop: dict[str, Any]) -> dict[str, Any]:
    took = _ms_between(stop["requested"], stop["stopped"])
    return {"kind": stop["kind"], "timed_out": stop["kind"] in ("time_limit", "hard_time_limit"),
            "by": stop["by"], "reason": stop["reason"], "error": stop["error"],
            "requested_at": _iso(stop["requested"]), "limit_at": _iso(stop["limit_at"]),
            "stopped_at": _iso(stop["stopped"]),
            "took_ms": took, "last_heartbeat_at": _iso(stop["last_heartbeat"]),
            "worker": stop["worker"]}


# -- reading the record -----------------------------------------------------------------------------
def _steps(trace: Trace, since: datetime | None) -> list[Step]:
    last = trace.steps.aggregate(last=Max("iteration"))["last"] or 0
    cut = (Q(iteration__gte=last) | Q(status__in=[Step.Status.RUNNING, Step.Status.WAITING])
           | Q(error__in=CUT_ERRORS) | Q(error__startswith=CUT_PREFIXES[0])
           | Q(error__startswith=CUT_PREFIXES[1])
           | Q(kind=Step.Kind.APPROVAL, meta__reason=APPROVAL_WITHDRAWN_REASON)
           | Q(kind=Step.Kind.RETRY, meta__restart=True, iteration__gte=max(last - 1, 0)))
    if since is not None:
        cut |= Q(started_at__gte=since)
    rows = list(trace.steps.filter(cut).only(*STEP_FIELDS).order_by("-seq")[:MAX_STEPS])
    rows.reverse()
    return rows


def _payloads(steps: list[Step]) -> dict[tuple[int, str], StepPayload]:
    """The payloads the audit reads: what model requests streamed and answered, what tools
    returned."""
    ids = [s.pk for s in steps if s.kind in (Step.Kind.LLM_REQUEST, Step.Kind.TOOL_CALL, Step.Kind.RETRY)]
    if not ids:
        return {}
    kinds = [StepPayload.Kind.PARTIAL, StepPayload.Kind.RESPONSE, StepPayload.Kind.MESSAGE,
             StepPayload.Kind.OUTPUT]
    rows = StepPayload.objects.filter(step_id__in=ids, kind__in=kinds).only(
        "step_id", "kind", "content", "content_type")
    return {(p.step_id, p.kind): p for p in rows}


def _json(payload: StepPayload | None) -> Any:
    if payload is None:
        return None
    try:
        return json.loads(payload.content)
    except ValueError:
        return None


def _end(step: Step) -> datetime | None:
    if step.started_at is None or step.duration_ms is None:
        return None
    return step.started_at + timedelta(milliseconds=float(step.duration_ms))


def _ms_between(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None:
        return None
    return int(round((end - start).total_seconds() * 1000))


def _meta(step: Step) -> dict[str, Any]:
    return step.meta if isinstance(step.meta, dict) else {}


def _is_cut(step: Step) -> bool:
    return (step.status in (Step.Status.RUNNING, Step.Status.WAITING) or step.error in CUT_ERRORS
            or step.error.startswith(CUT_PREFIXES))


# -- the model requests in flight ----------------------------------------------------------------
def _requests(steps: list[Step], payloads: dict[tuple[int, str], StepPayload]) -> list[dict[str, Any]]:
    out = []
    restarts: dict[int, list[Step]] = {}
    for step in steps:
        if step.kind == Step.Kind.RETRY and _meta(step).get("restart"):
            restarts.setdefault(int(_meta(step).get("restarted_step") or 0), []).append(step)
    for step in steps:
        if step.kind != Step.Kind.LLM_REQUEST or not _is_cut(step):
            continue
        text, source = _streamed(step, payloads)
        meta = _meta(step)
        discarded = []
        for retry in restarts.get(step.seq, []):
            output = payloads.get((retry.pk, StepPayload.Kind.OUTPUT))
            if output is not None and output.content:
                discarded.append({"seq": retry.seq, "chars": len(output.content)})
        out.append({
            "seq": step.seq, "model": step.model, "provider": step.provider,
            "state": "running" if step.status == Step.Status.RUNNING else "cut",
            "error": step.error,
            "text": text[:TEXT_PREVIEW_CHARS], "text_chars": len(text),
            "truncated": len(text) > TEXT_PREVIEW_CHARS, "text_source": source,
            "usage": {name: getattr(step, name) for name in USAGE},
            "tokens": step.input_tokens + step.cache_write_tokens + step.cache_read_tokens + step.output_tokens,
            "estimated": bool(meta.get("usage_estimated")),
            "cost_usd": _usd(step.cost_usd), "unpriced": bool(meta.get("unpriced")),
            "ran_ms": step.duration_ms,
            "restarts": discarded,
        })
    return out


def _streamed(step: Step, payloads: dict[tuple[int, str], StepPayload]) -> tuple[str, str]:
    """The text a cut request had streamed, and where it was found: the text saved while it
    streamed (``partial``), or the partial text its failed response kept."""
    partial = payloads.get((step.pk, StepPayload.Kind.PARTIAL))
    response = _json(payloads.get((step.pk, StepPayload.Kind.RESPONSE)))
    kept = response.get("partial_text") if isinstance(response, dict) else None
    if isinstance(kept, str) and kept and (partial is None or len(kept) >= len(partial.content)):
        return kept, "response"
    if partial is not None and partial.content:
        return partial.content, "partial"
    return "", ""


# -- tools ------------------------------------------------------------------------------------------
def _tools(steps: list[Step], payloads: dict[tuple[int, str], StepPayload],
           stop: dict[str, Any]) -> list[dict[str, Any]]:
    requested = stop["requested"] or stop["stopped"]
    out = []
    started_ids = {s.call_id for s in steps if s.kind == Step.Kind.TOOL_CALL and s.call_id}
    for step in steps:
        if step.kind != Step.Kind.TOOL_CALL:
            continue
        output = payloads.get((step.pk, StepPayload.Kind.OUTPUT))
        synthetic = output is not None and output.content in SYNTHETIC_OUTPUTS
        end = _end(step)
        row = {"seq": step.seq, "name": step.name, "call_id": step.call_id,
               "ran_ms": step.duration_ms, "started_at": _iso(step.started_at), "ended_at": _iso(end),
               "after_stop_ms": _ms_between(requested, end) if end and requested and end > requested else None}
        if _is_cut(step) or synthetic:
            if step.duration_ms == 0 and synthetic and output.content == CANCELLED_OUTPUT:
                # Answered as cancelled without running: a later call of the same answer.
                row.update(state="never_started", detail="Never started: answered as cancelled.")
            elif output is None or not output.content:
                row.update(state="abandoned", detail="Abandoned while running: no result was recorded.")
            else:
                label = SYNTHETIC_OUTPUTS.get(output.content, "stopped")
                row.update(state="abandoned",
                           detail=f"Abandoned while running: given a synthetic result ({label}).")
            out.append(row)
        elif requested is not None and end is not None and end > requested:
            result = "succeeded" if step.success else "failed"
            row.update(state="finished_after",
                       detail=f"Finished after the stop ({result}), {row['after_stop_ms']} ms after it.")
            out.append(row)
    out.extend(_never_started(steps, payloads, started_ids))
    return out


def _never_started(steps: list[Step], payloads: dict[tuple[int, str], StepPayload],
                   started_ids: set[str]) -> list[dict[str, Any]]:
    """Calls the model asked for in an answer whose calls have no step: the stop came before
    they ran. From the answer's stored message (with call ids), else from its call names."""
    out = []
    for step in steps:
        if step.kind != Step.Kind.LLM_REQUEST or step.status != Step.Status.OK:
            continue
        message = _json(payloads.get((step.pk, StepPayload.Kind.MESSAGE)))
        if message is None:
            message = (_json(payloads.get((step.pk, StepPayload.Kind.RESPONSE))) or {}).get("message")
        blocks = message.get("blocks") if isinstance(message, dict) else None
        if isinstance(blocks, list):
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("id") not in started_ids:
                    out.append({"seq": None, "asked_in": step.seq, "name": str(block.get("name", "")),
                                "call_id": str(block.get("id", "")), "state": "never_started",
                                "detail": "Never started: the model asked for it, the stop came first.",
                                "ran_ms": None, "started_at": None, "ended_at": None, "after_stop_ms": None})
            continue
        names = [str(n) for n in _meta(step).get("tool_calls") or []]
        ran = [s.name for s in steps if s.kind == Step.Kind.TOOL_CALL and s.iteration == step.iteration]
        for name in names:
            if name in ran:
                ran.remove(name)
                continue
            out.append({"seq": None, "asked_in": step.seq, "name": name, "call_id": "",
                        "state": "never_started",
                        "detail": "Never started: the model asked for it, the stop came first.",
                        "ran_ms": None, "started_at": None, "ended_at": None, "after_stop_ms": None})
    return out


# -- approvals --------------------------------------------------------------------------------------
def _approvals(steps: list[Step]) -> list[dict[str, Any]]:
    out = []
    for step in steps:
        if step.kind != Step.Kind.APPROVAL:
            continue
        withdrawn = (_meta(step).get("reason") == APPROVAL_WITHDRAWN_REASON
                     or step.status == Step.Status.WAITING or step.error.startswith(CUT_PREFIXES))
        if withdrawn:
            out.append({"seq": step.seq, "name": step.name, "call_id": step.call_id,
                        "waited_ms": step.duration_ms,
                        "detail": step.error or "Still waiting for a decision when the turn stopped."})
    return out


# -- synthetic results ------------------------------------------------------------------------------
def _synthetic(steps: list[Step], payloads: dict[tuple[int, str], StepPayload],
               messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results written for calls left without one: in the conversation's stored messages
    (what the next turn reads) and on the tool steps."""
    out: list[dict[str, Any]] = []
    by_call = {s.call_id: s for s in steps if s.kind == Step.Kind.TOOL_CALL and s.call_id}
    seen = set()
    for message in messages:
        if message.get("role") != "tool" or not isinstance(message.get("blocks"), list):
            continue
        for block in message["blocks"]:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            output = block.get("output")
            if output not in SYNTHETIC_OUTPUTS:
                continue
            call_id = str(block.get("tool_use_id", ""))
            step = by_call.get(call_id)
            seen.add(call_id)
            out.append({"call_id": call_id, "name": str(block.get("name") or (step.name if step else "")),
                        "output": output, "label": SYNTHETIC_OUTPUTS[output], "seq": step.seq if step else None,
                        "in_history": True})
    for call_id, step in by_call.items():
        output = payloads.get((step.pk, StepPayload.Kind.OUTPUT))
        if call_id in seen or output is None or output.content not in SYNTHETIC_OUTPUTS:
            continue
        out.append({"call_id": call_id, "name": step.name, "output": output.content,
                    "label": SYNTHETIC_OUTPUTS[output.content], "seq": step.seq, "in_history": False})
    return out


# -- did anything run after the stop? ---------------------------------------------------------------
def _after_stop(trace: Trace, steps: list[Step], stop: dict[str, Any]) -> dict[str, Any]:
    """Evidence that something ran after the stop: a step (other than the one recording the
    stop) that started after it was asked for, a call that ran to a real result after it, a
    step or heartbeat after the turn ended, or a step still marked running."""
    requested, stopped = stop["requested"], stop["stopped"]
    evidence: list[dict[str, Any]] = []
    for step in steps:
        if step.kind == Step.Kind.ERROR:
            continue  # the record of the stop itself
        label = f"{step.get_kind_display()} {step.name}".strip()
        end = _end(step)
        if step.status in (Step.Status.RUNNING, Step.Status.WAITING):
            evidence.append({"seq": step.seq, "text": f"{label} is still marked {step.status} after the turn ended."})
            continue
        if requested is not None and step.started_at and step.started_at > requested:
            gap = _ms_between(requested, step.started_at)
            evidence.append({"seq": step.seq, "text": f"{label} started {gap} ms after the stop was asked for."})
            continue
        if stopped is not None and end is not None and end > stopped:
            gap = _ms_between(stopped, end)
            evidence.append({"seq": step.seq, "text": f"{label} ended {gap} ms after the turn was stopped."})
            continue
        if (requested is not None and end is not None and end > requested and not _is_cut(step)
                and step.kind in (Step.Kind.TOOL_CALL, Step.Kind.LLM_REQUEST)):
            gap = _ms_between(requested, end)
            evidence.append({"seq": step.seq, "text": f"{label} ran on to its result, {gap} ms after the "
                                                      "stop was asked for."})
    if stopped is not None and trace.heartbeat_at is not None and trace.heartbeat_at > stopped:
        gap = _ms_between(stopped, trace.heartbeat_at)
        evidence.append({"seq": None, "text": f"The worker's heartbeat was renewed {gap} ms after the turn "
                                              "was stopped."})
    checked = [
        "every step's start against the moment the stop was asked for" if requested else
        "every step's start against the end of the turn",
        "every step's end (start + duration) against the end of the turn",
        "calls and model requests that ran on to a result after the stop",
        "steps left running or waiting",
        "the worker's last heartbeat against the end of the turn",
    ]
    return {"ran": bool(evidence), "evidence": evidence, "checked": checked,
            "last_heartbeat_at": _iso(trace.heartbeat_at)}
