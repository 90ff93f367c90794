"""The chaos run's figures as a table, one column per database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .measures import summary as _summary

Row = tuple[str, Callable[[dict[str, Any]], Any]]


def _s(summary: dict[str, Any]) -> str:
    if not summary["n"] and not summary["missing"]:
        return "-"
    text = f"p50 {summary['p50']} / max {summary['max']} (n={summary['n']})"
    return text + (f", {summary['missing']} never" if summary["missing"] else "")


def _counts(mapping: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(mapping.items())) or "-"


ROWS: list[Row] = [
    ("turns sent", lambda f: f["turns"]["sent"]),
    ("  completed", lambda f: f["turns"]["completed"]),
    ("  resumed", lambda f: f["turns"]["resumed"]),
    ("  ended cleanly (failed/interrupted with an error)", lambda f: f["turns"]["ended_cleanly"]),
    ("  ... how they ended", lambda f: "; ".join(f"{k} ({v})" for k, v in
                                                 f["turns"].get("endings", {}).items()) or "-"),
    ("  ended without an error message", lambda f: f["turns"]["ended_unclearly"]),
    ("  stuck (queued/running after the wait)", lambda f: f["turns"]["stuck"]),
    ("  sends that raised", lambda f: f["turns"]["send_errors"]),
    ("worker kills (SIGKILL)", lambda f: f["killed"]["events"]),
    ("  turns cut off (distinct / cut-offs / cut off 2+ times)",
     lambda f: f"{f['killed']['turns']} / {f['killed']['cut_offs']} / {f['killed']['cut_off_twice_or_more']}"),
    ("  ... cut-offs landing in", lambda f: _counts(f["killed"]["landing"])),
    ("  killed turns completed", lambda f: f"{f['killed']['completed']} ({f['killed']['completed_pct']}%)"),
    ("  killed turns outcomes", lambda f: _counts(f["killed"]["outcomes"])),
    ("  detection s (kill -> handed back)", lambda f: _s(f["killed"]["detection_s"])),
    ("  ... detected by", lambda f: _counts(f["killed"]["detected_by"])),
    ("  resumption s (kill -> resumed)", lambda f: _s(f["killed"]["resumption_s"])),
    ("worker stops (SIGTERM)", lambda f: f["sigterm"]["events"]),
    ("  turns in flight / completed / handed back",
     lambda f: f"{f['sigterm']['turns']} / {f['sigterm']['completed']} / {f['sigterm']['handed_back']}"),
    ("  worker exit s after SIGTERM", lambda f: _s(f["sigterm"]["exit_s"])),
    ("  needed SIGKILL", lambda f: f["sigterm"]["forced_kills"]),
    ("Redis restarts", lambda f: f["redis"]["restarts"]),
    ("  turns in flight / completed", lambda f: f"{f['redis']['turns_in_flight']} / {f['redis']['in_flight_completed']}"),
    ("  worker exits / beat exits", lambda f: f"{f['redis']['worker_exits']} / {f['redis']['beat_exits']}"),
    ("  message while down: accepted",
     lambda f: f"{sum(p['accepted'] for p in f['redis']['messages_while_down'])} of "
               f"{len(f['redis']['messages_while_down'])}"),
    ("  ... the send took s", lambda f: _s(_summary(p.get("send_s") for p in f["redis"]["messages_while_down"]))),
    ("  ... start s after Redis is back", lambda f: _s(f["redis"]["start_after_return_s"])),
    ("Redis frozen (SIGSTOP)", lambda f: f["redis_freeze"]["freezes"]),
    ("  turns in flight / failed", lambda f: f"{f['redis_freeze']['in_flight']} / {f['redis_freeze']['in_flight_failed']}"),
    ("  message while frozen: the send took s",
     lambda f: ", ".join("no answer" if p is None else f"{p['send_s']}" + ("" if p["accepted"] else " (refused)")
                         for p in f["redis_freeze"]["messages_while_frozen"]) or "-"),
    ("database connections dropped", lambda f: f["db_drop"]["drops"]),
    ("  turns in flight / completed / failed by it",
     lambda f: f"{f['db_drop']['in_flight']} / {f['db_drop']['in_flight_completed']} / "
               f"{len(f['db_drop']['failed_internal'])}"),
    ("faults injected (of planned)",
     lambda f: ", ".join(f"{k} {v['injected']}/{v['planned']}" for k, v in f["injections"].items())),
    ("fault turns (30 % failing requests)", lambda f: f["faults"]["turns"]),
    ("  completed / ended cleanly / stuck",
     lambda f: f"{f['faults']['completed']} / {f['faults']['ended_cleanly']} / {f['faults']['stuck']}"),
    ("  faults played", lambda f: _counts(f["faults"]["faults_played"])),
    ("duplicated steps", lambda f: f["integrity"]["duplicate_steps"]),
    ("tool executions / re-runs / duplicated runs",
     lambda f: f"{f['integrity']['tool_executions']} / {f['integrity']['tool_reruns']} / "
               f"{f['integrity']['duplicate_tool_runs']}"),
    ("lost messages", lambda f: f["integrity"]["lost_messages"]),
    ("roll-up drift (roll-up amounts / trace totals)",
     lambda f: f"{f['integrity']['rollup_drift']} / {f['integrity']['trace_total_drift']}"),
    ("unexpected process exits", lambda f: len(f["exits"])),
    ("settle wait s / whole run s", lambda f: f"{f['settle_s']} / {f['elapsed_s']}"),
]


def table(runs: list[dict[str, Any]]) -> str:
    labels = [label for label, _ in ROWS]
    columns = [[str(_safe(value, run)) for _, value in ROWS] for run in runs]
    width = max(len(label) for label in labels)
    widths = [max(len(run["db"]), *(len(cell) for cell in column)) for run, column in zip(runs, columns, strict=True)]
    lines = [" " * width + "  " + "  ".join(run["db"].ljust(w) for run, w in zip(runs, widths, strict=True))]
    for index, label in enumerate(labels):
        cells = [column[index].ljust(w) for column, w in zip(columns, widths, strict=True)]
        lines.append(label.ljust(width) + "  " + "  ".join(cells))
    return "\n".join(lines)


def _safe(value: Callable[[dict[str, Any]], Any], run: dict[str, Any]) -> Any:
    try:
        return value(run)
    except (KeyError, TypeError):
        return "?"
