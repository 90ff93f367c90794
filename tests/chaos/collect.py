"""Reads the chaos run's outcome from the database (after everything settled) and from what the
harness and the fake model server saw, into the figures ``measures`` judges.

The database is fresh for each run, so every row in it belongs to the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import measures
from .model_server import FakeModelServer

FINAL = ("completed", "failed", "cancelled", "timed_out", "interrupted")
ACTIVE = ("queued", "running")
# A cut-off turn resumed later than this is listed by name in the figures.
SLOW_RESUMPTION_S = 20.0


@dataclass
class Sent:
    """One message the harness sent: its token (also the message's client id), when, and what
    ``turn_send`` answered."""

    token: str
    scenario: str
    at: float
    trace_id: int | None = None
    error: str = ""
    finished_at: float | None = None


@dataclass
class Event:
    """A worker killed (``sigkill``), stopped (``sigterm``) or a Redis restart (``redis``), and
    the turns that were running when it happened."""

    kind: str
    at: float
    worker: str = ""
    traces: list[int] = field(default_factory=list)
    landing: dict[int, str] = field(default_factory=dict)
    stop_s: float | None = None
    forced: bool = False
    back_at: float | None = None  # Redis: when it answered again
    until: float | None = None  # Redis: the end of the watch after its return
    probe: list[Sent] = field(default_factory=list)  # Redis: the message sent while it was down
    # Lookup calls of the traces cut off whose result was stored, as of ``recorded_at`` (the
    # worker's death; ``at`` when empty): any later run of one is a duplicate.
    recorded_calls: list[str] = field(default_factory=list)
    recorded_at: float | None = None


def _ts(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def hand_backs(trace_meta: Any, resume_steps: Iterable[dict[str, Any]]) -> list[tuple[float, str]]:
    """Every recorded hand-back of a trace (time, reason): the one in ``trace.meta["resume"]``
    (the latest) and those the resume steps mention."""
    found = []
    records = []
    if isinstance(trace_meta, dict) and isinstance(trace_meta.get("resume"), dict):
        records.append(trace_meta["resume"])
    for step in resume_steps:
        meta = step.get("meta") if isinstance(step.get("meta"), dict) else {}
        records.append(meta.get("resume") if isinstance(meta.get("resume"), dict) else meta)
    for record in records:
        at = _ts(record.get("handed_back_at"))
        if at is not None:
            found.append((at, str(record.get("reason") or "")))
    return sorted(set(found))


def handed_off_after(trace_meta: Any, resume_steps: Iterable[dict[str, Any]], at: float) -> bool:
    """Whether a stopping worker handed the trace back ("handoff") after ``at``: said by a
    resume step, or by the trace's last hand-back."""
    for step in resume_steps:
        meta = step.get("meta") if isinstance(step.get("meta"), dict) else {}
        started = _ts(step.get("started_at"))
        if meta.get("reason") == "handoff" and started is not None and started >= at:
            return True
    return any(reason == "handoff" and when >= at for when, reason in hand_backs(trace_meta, []))


def collect(*, sends: list[Sent], events: list[Event], server: FakeModelServer,
            exits: list[Any], observed: dict[tuple[float, int], float] | None = None) -> dict[str, Any]:
    """``observed``: (kill time, trace id) -> when the harness first saw the trace no longer
    running on the dead worker (``run.HandBackWatch``)."""
    observed = observed or {}
    from agents.models import Message
    from traces.models import Step, Trace

    traces = {row["id"]: row for row in Trace.objects.values(
        "id", "status", "attempts", "error", "error_kind", "meta", "started_at", "finished_at",
        "created_at", "team_id", "agent_id", "user_id", "conversation_id")}
    resume_steps: dict[int, list[dict[str, Any]]] = {}
    for step in Step.objects.filter(kind="resume").values("trace_id", "started_at", "meta"):
        resume_steps.setdefault(step["trace_id"], []).append(step)
    resumed = {tid for tid, row in traces.items() if row["attempts"] > 1 or tid in resume_steps}

    # -- the turns ----------------------------------------------------------------------------------
    messages = {m["client_id"]: m for m in Message.objects.filter(role="user").exclude(client_id="")
                .values("id", "client_id", "trace_id")}
    by_message = {}
    for row in Trace.objects.exclude(user_message=None).values("id", "user_message_id").order_by("id"):
        by_message.setdefault(row["user_message_id"], row["id"])
    lost: Counter[str] = Counter()
    trace_of: dict[str, int] = {}
    for sent in sends:
        message = messages.get(sent.token)
        trace_id = by_message.get(message["id"]) if message else None
        if message is None:
            lost["message not stored"] += 1
        elif trace_id is None:
            lost["no trace"] += 1
        elif traces[trace_id]["status"] not in FINAL:
            lost["trace never ended"] += 1
        if trace_id is not None:
            trace_of[sent.token] = trace_id
    ours = [traces[trace_of[s.token]] for s in sends if s.token in trace_of]
    statuses = Counter(row["status"] for row in ours)
    unclear = sum(1 for row in ours if row["status"] in FINAL and row["status"] != "completed"
                  and not row["error"].strip())
    turns = {
        "sent": len(sends), "completed": statuses["completed"], "failed": statuses["failed"],
        "interrupted": statuses["interrupted"], "timed_out": statuses["timed_out"],
        "cancelled": statuses["cancelled"],
        "ended_cleanly": sum(statuses[s] for s in FINAL if s != "completed") - unclear,
        "ended_unclearly": unclear,
        "stuck": sum(statuses[s] for s in ACTIVE),
        "resumed": sum(1 for row in ours if row["id"] in resumed),
        "send_errors": sum(1 for s in sends if s.error),
        # Why the others ended: (kind, the error's first line) and how often, for the reader.
        "endings": dict(Counter(
            f"{row['status']}/{row['error_kind'] or '-'}: {(row['error'].strip().splitlines() or [''])[0][:90]}"
            for row in ours if row["status"] in FINAL and row["status"] != "completed").most_common(8)),
    }

    # -- killed and stopped workers ---------------------------------------------------------------
    kills = [e for e in events if e.kind == "sigkill"]
    cut_off_at: dict[int, list[float]] = {}
    for event in kills:
        for trace_id in event.traces:
            cut_off_at.setdefault(trace_id, []).append(event.at)

    def window(trace_id: int, at: float) -> tuple[float, float]:
        """From a kill to the next kill of the same trace: what happened to it in between
        answers for this kill."""
        later = [t for t in cut_off_at.get(trace_id, []) if t > at]
        return at, min(later, default=float("inf"))

    def resumption(trace_id: int, at: float) -> float | None:
        start, end = window(trace_id, at)
        starts = [t for t in (_ts(s["started_at"]) for s in resume_steps.get(trace_id, []))
                  if t is not None and start <= t < end]
        return min(starts) - at if starts else None

    def detection(trace_id: int, at: float) -> tuple[float | None, str]:
        row = traces.get(trace_id)
        if row is None:
            return None, "gone"
        start, end = window(trace_id, at)
        backs = [t for t, _ in hand_backs(row["meta"], resume_steps.get(trace_id, []))
                 if start <= t < end]
        if backs:
            return min(backs) - at, "hand_back"
        seen = observed.get((at, trace_id))
        if seen is not None:
            return seen - at, "observed"
        resumed_after = resumption(trace_id, at)
        if resumed_after is not None:
            # Its hand-back was overwritten by a later one: the resumption bounds it.
            return resumed_after, "resume step"
        ended = _ts(row["finished_at"])
        if row["status"] in FINAL and row["status"] != "completed" and ended and start <= ended < end:
            return ended - at, "ended"
        return None, "never"

    detected, resumptions, how = [], [], Counter()
    each: list[dict[str, Any]] = []
    landing: Counter[str] = Counter()
    killed_ids: set[int] = set()
    first_kill = min((e.at for e in kills), default=0.0)
    for event in kills:
        for trace_id in event.traces:
            seconds, by = detection(trace_id, event.at)
            detected.append(seconds)
            each.append({"kill_at_s": round(event.at - first_kill, 1), "trace": trace_id, "by": by,
                         "s": round(seconds, 2) if seconds is not None else None})
            how[by] += 1
            resumptions.append(resumption(trace_id, event.at))
            landing[event.landing.get(trace_id, "between steps")] += 1
            killed_ids.add(trace_id)
    killed_done = sum(1 for tid in killed_ids if traces.get(tid, {}).get("status") == "completed")
    not_done = [{"trace": tid, "status": traces[tid]["status"], "attempts": traces[tid]["attempts"],
                 "cut_offs": len(cut_off_at[tid]), "error_kind": traces[tid]["error_kind"]}
                for tid in sorted(killed_ids) if tid in traces and traces[tid]["status"] != "completed"]
    slow = sorted(((r, tid) for event in kills for tid in event.traces
                   if (r := resumption(tid, event.at)) is not None and r > SLOW_RESUMPTION_S),
                  reverse=True)
    killed = {
        "events": len(kills), "turns": len(killed_ids), "cut_offs": sum(len(e.traces) for e in kills),
        "cut_off_twice_or_more": sum(1 for times in cut_off_at.values() if len(times) > 1),
        "completed": killed_done, "completed_pct": measures.pct(killed_done, len(killed_ids)),
        "resumed": len(killed_ids & resumed),
        "outcomes": dict(Counter(traces[t]["status"] for t in killed_ids if t in traces)),
        "landing": dict(landing), "detected_by": dict(how),
        "detection_s": measures.summary(detected),
        "resumption_s": measures.summary(r for r in resumptions if r is not None),
        "not_completed": not_done[:20],
        "slow_resumptions": [{"trace": tid, "s": round(r, 1)} for r, tid in slow[:10]],
        # the slowest detections, to see what they have in common (kill time from the first kill)
        "slowest_detections": sorted((e for e in each if e["s"] is not None), key=lambda e: -e["s"])[:5],
        "timeline": [(e.kind, round(e.at - first_kill, 1)) for e in sorted(events, key=lambda e: e.at)],
    }

    stops = [e for e in events if e.kind == "sigterm"]
    stopped_ids = {t for e in stops for t in e.traces}
    first_stop: dict[int, float] = {}
    for event in stops:
        for trace_id in event.traces:
            first_stop.setdefault(trace_id, event.at)
    handed_off = sum(1 for t, at in first_stop.items()
                     if handed_off_after(traces.get(t, {}).get("meta"), resume_steps.get(t, []), at))
    sigterm = {
        "events": len(stops), "turns": len(stopped_ids),
        "completed": sum(1 for t in stopped_ids if traces.get(t, {}).get("status") == "completed"),
        "handed_back": handed_off, "forced_kills": sum(1 for e in stops if e.forced),
        "exit_s": measures.summary(e.stop_s for e in stops),
        "outcomes": dict(Counter(traces[t]["status"] for t in stopped_ids if t in traces)),
    }

    # -- Redis restarts -----------------------------------------------------------------------------
    restarts = [e for e in events if e.kind == "redis"]
    in_flight = {t for e in restarts for t in e.traces}

    def during(exit_: Any, event: Event) -> bool:
        return event.at <= exit_.at <= (event.until or event.at)

    probes = []
    for event in restarts:
        if not event.probe:
            continue
        probe = event.probe[0]
        trace_id = trace_of.get(probe.token)
        started = _ts(traces[trace_id]["started_at"]) if trace_id else None
        probes.append({"accepted": not probe.error, "error": probe.error[:300],
                       "send_s": round((probe.finished_at or probe.at) - probe.at, 2),
                       "sent_while_down": probe.at < (event.back_at or probe.at + 1),
                       "start_after_return_s": (round(started - event.back_at, 2)
                                                if started is not None and event.back_at else None),
                       "status": traces[trace_id]["status"] if trace_id else "no trace"})
    redis = {
        "restarts": len(restarts), "turns_in_flight": len(in_flight),
        "in_flight_completed": sum(1 for t in in_flight if traces.get(t, {}).get("status") == "completed"),
        "worker_exits": sum(1 for x in exits for e in restarts if x.name.startswith("chaos") and during(x, e)),
        "beat_exits": sum(1 for x in exits for e in restarts if x.name.startswith("beat") and during(x, e)),
        "messages_while_down": probes,
        "start_after_return_s": measures.summary(p["start_after_return_s"] for p in probes),
    }

    # -- a frozen Redis, dropped database connections ------------------------------------------
    freezes = [e for e in events if e.kind == "redis-freeze"]
    freeze_probes = []
    for event in freezes:
        probe = event.probe[0] if event.probe else None
        freeze_probes.append(None if probe is None else {
            "accepted": not probe.error, "error": probe.error[:300],
            "send_s": round((probe.finished_at or probe.at) - probe.at, 2)})
    frozen_in_flight = {t for e in freezes for t in e.traces}
    redis_freeze = {
        "freezes": len(freezes),
        "messages_while_frozen": freeze_probes,
        "in_flight": len(frozen_in_flight),
        "in_flight_failed": sum(1 for t in frozen_in_flight
                                if traces.get(t, {}).get("status") in ("failed", "timed_out")),
        "worker_exits": sum(1 for x in exits for e in freezes if x.name.startswith("chaos")
                            and e.at <= x.at <= (e.until or e.at)),
    }
    drops = [e for e in events if e.kind == "db-drop"]
    dropped_in_flight = {t for e in drops for t in e.traces}
    db_drop = {
        "drops": len(drops), "in_flight": len(dropped_in_flight),
        "in_flight_completed": sum(1 for t in dropped_in_flight
                                   if traces.get(t, {}).get("status") == "completed"),
        # What a lost connection used to do: a final failure of kind "internal".
        "failed_internal": sorted(t for t in dropped_in_flight
                                  if traces.get(t, {}).get("status") == "failed"
                                  and traces[t]["error_kind"] == "internal"),
    }

    # -- the fault scenario ---------------------------------------------------------------------
    fault_rows = [traces[trace_of[s.token]] for s in sends if s.scenario == "faults" and s.token in trace_of]
    fault_statuses = Counter(row["status"] for row in fault_rows)
    faults = {"turns": sum(1 for s in sends if s.scenario == "faults"),
              "completed": fault_statuses["completed"],
              "ended_cleanly": sum(1 for r in fault_rows if r["status"] in FINAL
                                   and r["status"] != "completed" and r["error"].strip()),
              "stuck": sum(fault_statuses[s] for s in ACTIVE),
              "faults_played": dict(server.faults)}

    recorded = dict(server.results_seen)
    for event in events:
        for call in event.recorded_calls:
            at = event.recorded_at or event.at
            recorded[call] = min(at, recorded.get(call, at))
    integrity = integrity_figures({key: [run.started for run in runs]
                                   for key, runs in server.execution_log().items()}, recorded)
    integrity["lost_messages"] = sum(lost.values())
    integrity["lost_by_reason"] = dict(lost)
    return {"turns": turns, "killed": killed, "sigterm": sigterm, "redis": redis, "faults": faults,
            "redis_freeze": redis_freeze, "db_drop": db_drop, "integrity": integrity,
            "exits": [{"name": x.name, "code": x.code, "last_lines": x.last_lines} for x in exits]}


def integrity_figures(executions: dict[str, list[float]], recorded: dict[str, float]) -> dict[str, Any]:
    """Duplicated steps, tool runs repeated after their result was recorded (``executions``:
    call key -> start times the tool saw; ``recorded``: call key -> a moment its result was
    known to be stored), and drift of the roll-ups and trace totals from the steps they sum.

    When a result was stored is taken from outside the worker: a model request that carried it,
    or a dead worker's trace whose step held it. (The step's own start plus its duration is no
    bound: its start is taken before a write that can wait seconds for SQLite's lock, and the
    duration is measured after that write.)"""
    from traces.costs.pricing import cost_units
    from traces.costs.rollups import AMOUNT_FIELDS, step_share, trace_totals_from_steps
    from traces.models import ConversationCostRollup, CostRollup, Step, Trace

    keys = [(trace_id, (meta or {}).get("key", "") if isinstance(meta, dict) else "")
            for trace_id, meta in Step.objects.values_list("trace_id", "meta")]
    duplicates = measures.duplicate_step_keys(keys)

    runs = measures.tool_runs(executions, recorded)
    repeated = [_tool_call_story(key, executions[key]) for key in runs.duplicated_keys[:10]]

    dims = {row["id"]: row for row in Trace.objects.values("id", "team_id", "agent_id", "user_id",
                                                           "conversation_id")}
    expected: dict[Any, dict[str, int]] = {}
    expected_conv: dict[Any, dict[str, int]] = {}
    for step in Step.objects.filter(kind="llm_request").only(
            "trace_id", "kind", "status", "started_at", "provider", "model", "meta", "price_match",
            "cost_usd", "input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens",
            "reasoning_tokens"):
        share = step_share(step)
        if share is None:
            continue
        d = dims[step.trace_id]
        amounts = {name: value for name, value in share.amounts().items() if name in AMOUNT_FIELDS}
        base = (d["team_id"], share.day, d["agent_id"] or 0, d["user_id"] or 0,
                share.provider[:100], share.model[:200])
        measures.add_amounts(expected, base, amounts)
        measures.add_amounts(expected_conv, (*base, d["conversation_id"] or 0), amounts)
    actual = {(r["team_id"], r["day"], r["agent_id"], r["user_id"], r["provider"], r["model"]):
              {name: r[name] for name in AMOUNT_FIELDS}
              for r in CostRollup.objects.values("team_id", "day", "agent_id", "user_id", "provider",
                                                 "model", *AMOUNT_FIELDS)}
    actual_conv = {(r["team_id"], r["day"], r["agent_id"], r["user_id"], r["provider"], r["model"],
                    r["conversation_id"]): {name: r[name] for name in AMOUNT_FIELDS}
                   for r in ConversationCostRollup.objects.values(
                       "team_id", "day", "agent_id", "user_id", "provider", "model",
                       "conversation_id", *AMOUNT_FIELDS)}
    drift = measures.ledger_drift(expected, actual) + measures.ledger_drift(expected_conv, actual_conv)

    trace_drift = []
    for row in Trace.objects.filter(status__in=FINAL).values():
        want = trace_totals_from_steps(row["id"])
        want["cost_usd"], row["cost_usd"] = cost_units(want["cost_usd"]), cost_units(row["cost_usd"])
        differs = [name for name, value in want.items() if row.get(name) != value]
        if differs:
            trace_drift.append({"trace": row["id"], "fields": differs})
    return {
        "duplicate_steps": sum(n - 1 for n in duplicates.values()),
        "duplicate_step_keys": [f"trace {t} {k} x{n}" for (t, k), n in sorted(duplicates.items())][:20],
        "tool_executions": runs.executions, "duplicate_tool_runs": runs.duplicates,
        "tool_reruns": runs.reruns, "duplicated_tool_calls": repeated,
        "rollup_drift": len(drift),
        "rollup_drift_rows": [f"{d.key} {d.field}: steps {d.expected}, roll-up {d.actual}"
                              for d in drift][:20],
        "cost_usd": str(sum((r["cost_usd"] for r in Trace.objects.values("cost_usd")), 0)),
        "trace_total_drift": len(trace_drift), "trace_total_drift_rows": trace_drift[:20],
    }


def _tool_call_story(key: str, starts: list[float]) -> dict[str, Any]:
    """What the database holds about a tool call that ran again after its result was recorded:
    its steps and its trace, with times in seconds from the call's first execution."""
    from traces.models import Step, Trace

    first = min(starts)
    steps = list(Step.objects.filter(call_id=key).order_by("trace_id", "seq").values(
        "trace_id", "seq", "iteration", "kind", "status", "started_at", "duration_ms"))
    trace_ids = sorted({s["trace_id"] for s in steps})
    return {
        "call": key, "executions_s": [round(t - first, 2) for t in sorted(starts)],
        "steps": [f"trace {s['trace_id']} #{s['seq']} it{s['iteration']} {s['kind']} {s['status']} "
                  f"at {s['started_at'].timestamp() - first:.2f} s for {s['duration_ms']} ms"
                  for s in steps],
        "traces": list(Trace.objects.filter(pk__in=trace_ids).values(
            "id", "status", "attempts", "error_kind", "worker", "meta")),
    }
