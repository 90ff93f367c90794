"""What the chaos suite counts, as plain functions over plain data (``collect`` reads the
database into these shapes; the unit tests feed them by hand): duplicated steps, tool calls run
again after their result was recorded, ledger drift, time figures, and the issue's targets.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The targets (issue 13, "Targets"; issue 30 added the frozen Redis and the dropped
# database connections, and that every fault planned is made).
SEND_WHILE_FROZEN_MAX_S = 5.0
KILLED_COMPLETED_MIN_PCT = 95.0
DETECTION_P50_MAX_S = 5.0
DETECTION_MAX_S = 10.0
START_AFTER_REDIS_MAX_S = 5.0


def duplicate_step_keys(rows: Iterable[tuple[int, str]]) -> dict[tuple[int, str], int]:
    """(trace id, step key) pairs stored more than once, with their count. The recorder gives
    every event a key (``llm:<iteration>:<n>``, ``tool:<iteration>:<call id>``...) that maps
    to one row; two rows with one key are one event recorded twice. Rows without a key are
    left out."""
    counts = Counter((trace, key) for trace, key in rows if key)
    return {pair: n for pair, n in counts.items() if n > 1}


@dataclass(frozen=True)
class ToolRuns:
    executions: int
    # Runs that started after the call's result had been recorded: the tool ran again although
    # the trace already had its answer (what resumption must never do).
    duplicates: int
    # Other runs beyond the first: a call cut off by a dead worker and run again (allowed for an
    # idempotent tool) or a run whose worker died before recording it.
    reruns: int
    duplicated_keys: tuple[str, ...] = ()


def tool_runs(executions: Mapping[str, Sequence[float]], recorded_at: Mapping[str, float]) -> ToolRuns:
    """``executions``: call key -> start time of every execution the tool saw; ``recorded_at``:
    call key -> when its result was first stored in a step (absent: never)."""
    total = duplicates = reruns = 0
    duplicated = []
    for key, starts in executions.items():
        total += len(starts)
        recorded = recorded_at.get(key)
        after = sum(1 for start in starts if recorded is not None and start > recorded)
        if after:
            duplicated.append(key)
        duplicates += after
        reruns += max(len(starts) - 1 - after, 0)
    return ToolRuns(total, duplicates, reruns, tuple(sorted(duplicated)))


@dataclass(frozen=True)
class Drift:
    key: Hashable
    field: str
    expected: int
    actual: int


def ledger_drift(expected: Mapping[Hashable, Mapping[str, int]],
                 actual: Mapping[Hashable, Mapping[str, int]]) -> list[Drift]:
    """Every (row key, amount) where the roll-up differs from what the steps add up to. A key
    missing on one side counts as zeros there, so a roll-up row of all zeros is no drift."""
    found = []
    for key in sorted(set(expected) | set(actual), key=repr):
        want, have = expected.get(key, {}), actual.get(key, {})
        for name in sorted(set(want) | set(have)):
            if int(want.get(name, 0)) != int(have.get(name, 0)):
                found.append(Drift(key, name, int(want.get(name, 0)), int(have.get(name, 0))))
    return found


def add_amounts(into: dict[Hashable, dict[str, int]], key: Hashable, amounts: Mapping[str, int]) -> None:
    bucket = into.setdefault(key, {})
    for name, value in amounts.items():
        bucket[name] = bucket.get(name, 0) + int(value)


def summary(values: Iterable[float | None]) -> dict[str, Any]:
    """n, median and max of the values that exist; ``missing`` counts the None ones (a turn
    never detected, a message that never started)."""
    given = list(values)
    present = [v for v in given if v is not None]
    return {"n": len(present), "missing": len(given) - len(present),
            "p50": round(statistics.median(present), 2) if present else None,
            "max": round(max(present), 2) if present else None}


def first_at_or_after(moments: Iterable[float], since: float, *, slack: float = 0.0) -> float | None:
    """The earliest moment at or after ``since`` (less ``slack`` seconds), or None."""
    later = [m for m in moments if m >= since - slack]
    return min(later) if later else None


def pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def targets_missed(figures: Mapping[str, Any]) -> list[str]:
    """The issue's targets this run missed, each as a sentence; empty when all were met."""
    missed = []
    turns, integrity = figures["turns"], figures["integrity"]
    killed, redis = figures["killed"], figures["redis"]
    if turns["stuck"]:
        missed.append(f"{turns['stuck']} turn(s) stuck in queued/running after the wait (target 0)")
    if integrity["duplicate_steps"]:
        missed.append(f"{integrity['duplicate_steps']} duplicated step(s) (target 0)")
    if integrity["duplicate_tool_runs"]:
        missed.append(f"{integrity['duplicate_tool_runs']} tool run(s) repeated after their result "
                      "was recorded (target 0)")
    if integrity["lost_messages"]:
        missed.append(f"{integrity['lost_messages']} lost message(s) (target 0)")
    if integrity["rollup_drift"] or integrity["trace_total_drift"]:
        missed.append(f"roll-up drift: {integrity['rollup_drift']} roll-up amount(s) and "
                      f"{integrity['trace_total_drift']} trace total(s) differ from their steps "
                      "(target 0)")
    if killed["events"]:
        share = killed["completed_pct"]
        if not killed["turns"]:
            missed.append("no turn was in flight at any worker kill: nothing was measured")
        elif share is None or share < KILLED_COMPLETED_MIN_PCT:
            missed.append(f"{share}% of killed turns completed after resumption "
                          f"(target >= {KILLED_COMPLETED_MIN_PCT:g}%)")
        detection = killed["detection_s"]
        if detection["missing"]:
            missed.append(f"{detection['missing']} killed turn(s) never handed back (target: all "
                          f"within {DETECTION_MAX_S:g} s)")
        if detection["p50"] is not None and detection["p50"] > DETECTION_P50_MAX_S:
            missed.append(f"detection median {detection['p50']} s (target <= {DETECTION_P50_MAX_S:g} s)")
        if detection["max"] is not None and detection["max"] > DETECTION_MAX_S:
            missed.append(f"detection max {detection['max']} s (target <= {DETECTION_MAX_S:g} s)")
    if redis["worker_exits"]:
        missed.append(f"{redis['worker_exits']} worker exit(s) on Redis restarts (target 0)")
    start = redis["start_after_return_s"]
    if start["missing"]:
        missed.append(f"{start['missing']} message(s) sent while Redis was down never started "
                      f"(target: within {START_AFTER_REDIS_MAX_S:g} s of its return)")
    if start["max"] is not None and start["max"] > START_AFTER_REDIS_MAX_S:
        missed.append(f"a message sent while Redis was down started {start['max']} s after its "
                      f"return (target <= {START_AFTER_REDIS_MAX_S:g} s)")
    for kind, counts in (figures.get("injections") or {}).items():
        if counts["injected"] < counts["planned"]:
            missed.append(f"{kind.replace('_', ' ')}: {counts['injected']} of {counts['planned']} "
                          "injected (target: every one planned; the run ran out of time)")
    freeze = figures.get("redis_freeze") or {}
    for probe in freeze.get("messages_while_frozen", []):
        if probe is None or probe["send_s"] > SEND_WHILE_FROZEN_MAX_S:
            took = "no answer" if probe is None else f"{probe['send_s']} s"
            missed.append(f"a message sent while Redis hung was answered after {took} "
                          f"(target <= {SEND_WHILE_FROZEN_MAX_S:g} s)")
    if freeze.get("worker_exits"):
        missed.append(f"{freeze['worker_exits']} worker exit(s) while Redis hung (target 0)")
    if freeze.get("in_flight_failed"):
        missed.append(f"{freeze['in_flight_failed']} turn(s) in flight while Redis hung failed or "
                      "timed out (target 0)")
    drop = figures.get("db_drop") or {}
    if drop.get("failed_internal"):
        missed.append(f"{len(drop['failed_internal'])} turn(s) failed by a dropped database "
                      f"connection (target 0): {drop['failed_internal'][:10]}")
    return missed
