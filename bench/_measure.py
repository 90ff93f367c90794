"""What every benchmark measures besides its own figures: the machine's load when it starts, the
CPU time its unit of work costs, that cost against the committed baseline, and flame graphs.

* ``machine()`` / ``print_machine()``: the load average and the CPU count, printed at start (a
  figure taken on a busy machine says so), and ``machine_speed_ms()``: the CPU a fixed piece of
  plain Python takes here, recorded with every figure so that a baseline recorded on a slower
  or faster machine is compared scaled to this one.
* ``cpu_seconds(pid, tree=...)``: user + system CPU of another process (and of its descendants)
  from ``/proc``; in-process benchmarks take ``time.process_time()`` (every thread of this
  process) or ``time.thread_time()`` deltas instead.
* ``record(bench, figures)``: the benchmark's headline CPU per unit of work (figure name with
  its unit -> value), printed beside ``bench/baseline.json`` and, when ``python -m bench`` runs
  it, appended as a JSON line to the file named by ``BENCH_RESULTS``. The runner prints what
  moved past the tolerance and, with ``--update-baseline``, writes the run into the baseline.
  ``reference`` figures are stored and shown but never flagged (the gateway's LiteLLM figures,
  which it falls back on when LiteLLM cannot run).

Flame graphs of the measured processes are ``bench._profile``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
BASELINE = Path(__file__).with_name("baseline.json")
RESULTS_ENV = "BENCH_RESULTS"
TOLERANCE = 0.20  # a figure further than this from its baseline is flagged
_TICKS = os.sysconf("SC_CLK_TCK")


# -- the machine and CPU time --------------------------------------------------------------------
def machine() -> str:
    """The load average and the CPU count, in one line."""
    try:
        one, five, fifteen = os.getloadavg()
        load = f"load average {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min)"
    except OSError:
        load = "load average unknown"
    return f"{load}, {os.cpu_count()} CPUs"


_printed: list[str] = []


def print_machine() -> str:
    """Print the machine's load (once per process: the first call is the start); the line."""
    if not _printed:
        _printed.append(machine())
        # Calibrated now, before the benchmark starts its processes: measured beside a running
        # stack, the same loop took up to twice as long.
        print(f"machine at start: {_printed[0]}; calibration {machine_speed_ms():.0f} ms", flush=True)
    return _printed[0]


def _calibration() -> int:
    """A fixed piece of plain Python of the kind a request is: calls, dict reads and writes,
    string formatting."""
    counts: dict[str, int] = {}
    total = 0
    for i in range(200_000):
        key = f"row-{i % 997}"
        counts[key] = counts.get(key, 0) + 1
        total += len(key)
    return total + len(counts)


_speed: list[float] = []


def machine_speed_ms() -> float:
    """CPU milliseconds ``_calibration`` takes on this machine, the best of ten (measured once
    per process, at its start). Several times larger on a slower machine: CPU per unit of work
    grows alike. On a shared virtual machine it varies between processes too (up to twice, in
    slow spells), so a scaled comparison is a guide, not a measurement."""
    if not _speed:
        _speed.append(_calibrated_ms())
    return _speed[0]


def _calibrated_ms() -> float:
    best = float("inf")
    for _ in range(10):
        started = time.process_time()
        _calibration()
        best = min(best, time.process_time() - started)
    return round(best * 1000, 2)


def speed_drift_note(start_ms: float) -> str | None:
    """The calibration again, at the end of a run: a note when the machine's speed moved by
    more than a fifth since its start (a shared machine's slow spell), as every figure of the
    run moved with it."""
    end_ms = _calibrated_ms()
    if start_ms and abs(end_ms - start_ms) / start_ms > 0.2:
        return (f"  (caution: the machine's speed moved during the run: calibration {start_ms:.0f} ms at "
                f"start, {end_ms:.0f} ms at the end; the run's times and CPU figures moved with it)")
    return None


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """The live processes under ``pid`` (children, their children ...)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pid: int | None, *, tree: bool = False) -> float:
    """User + system CPU seconds of a process (Linux; 0 where /proc cannot tell). With ``tree``,
    also its live descendants' and what its finished children left it (the waited-for ones)."""
    if pid is None:
        return 0.0
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if tree:
        ticks += int(fields[13]) + int(fields[14])
        for child in descendants(pid):
            child_fields = _stat(child)
            if child_fields is not None:
                ticks += int(child_fields[11]) + int(child_fields[12])
    return ticks / _TICKS


class CpuMeter:
    """CPU seconds of several processes between ``start()`` and ``stop()``: ``{name: pid}``, and
    ``tree`` names whose descendants count too."""

    def __init__(self, pids: Mapping[str, int | None], *, tree: tuple[str, ...] = ()) -> None:
        self.pids = dict(pids)
        self.tree = tree
        self.before: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        return {name: cpu_seconds(pid, tree=name in self.tree) for name, pid in self.pids.items()}

    def start(self) -> CpuMeter:
        self.before = self._read()
        return self

    def stop(self) -> dict[str, float]:
        after = self._read()
        self.used = {name: after[name] - self.before.get(name, 0.0) for name in after}
        return self.used


# -- samples -------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; NaN for none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(int(round(q * (len(ordered) - 1))), len(ordered) - 1)]


def error_reason(status: int, text: str) -> str:
    """A failed HTTP answer in one line: Django's error (its debug page's title, or a
    traceback's last line), an OpenAI-style ``{"error": {"message": ...}}``, else the start of
    the body."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "<title>" in text:
        title = " ".join(text.split("<title>", 1)[1].split("</title>", 1)[0].split()).split(" at /")[0]
        if 'class="exception_value">' in text:
            value = text.split('class="exception_value">', 1)[1].split("</pre>", 1)[0]
            title = f"{title}: {' '.join(value.split())}"
        return f"HTTP {status}: {title[:160]}"
    if lines and lines[0].startswith("Traceback"):
        return f"HTTP {status}: {lines[-1][:160]}"
    with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
        error = json.loads(text)["error"]
        return f"HTTP {status}: {(error.get('message') if isinstance(error, dict) else error)!s:.160}"
    return f"HTTP {status}: {' '.join(lines)[:160]}"


# -- figures and the baseline ------------------------------------------------------------------
def load_baseline(path: Path = BASELINE) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run_arguments() -> list[str]:
    """This run's arguments that change what is measured (not --check, not --profile)."""
    args, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if arg in ("--check",) or arg.startswith("--profile="):
            continue
        if arg == "--profile":
            skip = True
            continue
        args.append(arg)
    return args


def _load1(machine_line: str) -> float | None:
    match = re.search(r"load average ([\d.]+)", machine_line or "")
    return float(match.group(1)) if match else None


def load_note(current: str, baseline: str | None) -> str | None:
    """A caution when this run's load at start is high, or far from the baseline's: CPU time
    per unit of work runs higher on a busy machine (shared caches and cores; 20-70 % was seen
    on this project's 2-core machine at a load of 3-4), so a move may be the machine's."""
    cpus = os.cpu_count() or 1
    now, then = _load1(current), _load1(baseline or "")
    if now is None or (now <= 0.75 * cpus and (then is None or abs(now - then) <= 0.5 * cpus)):
        return None
    base = f", the baseline's {then:.2f}" if then is not None else ""
    return (f"(caution: the load at start was {now:.2f} on {cpus} CPUs{base}: CPU per unit of work "
            "runs higher on a busy machine, so compare runs made at a similar, low load)")


def moved(value: float, base: float | None, tolerance: float) -> float | None:
    """The relative change from ``base`` when it is past ``tolerance``, else None."""
    if not base or value != value:  # no baseline, or NaN
        return None
    change = value / base - 1
    return change if abs(change) > tolerance else None


def speed_scale(recorded: float | None, current: float | None) -> float | None:
    """How much more CPU a unit of work takes here than on the baseline's machine (None when
    either calibration is missing)."""
    if not recorded or not current:
        return None
    return current / recorded


def comparison(bench: str, figures: Mapping[str, float], baseline: Mapping[str, Any], *,
               tolerance: float, args: list[str] | None = None,
               speed_ms: float | None = None) -> tuple[list[str], list[str]]:
    """Lines showing each figure beside its baseline (scaled to this machine's speed when both
    runs were calibrated, ``speed_ms``), and the subset that moved."""
    entry = (baseline.get("benches") or {}).get(bench) or {}
    base = dict(entry.get("cpu") or {})
    width = max((len(name) for name in figures), default=0)
    lines, flagged = [], []
    scale = speed_scale(entry.get("speed_ms"), speed_ms)
    if scale is not None:
        base = {name: value * scale for name, value in base.items()}
        if args is not None:
            lines.append(f"  (this machine runs the calibration in {speed_ms:.0f} ms, the baseline's in "
                         f"{entry['speed_ms']:.0f} ms: the baseline's figures are scaled by {scale:.2f})")
    elif args is not None and entry and speed_ms and not entry.get("speed_ms"):
        lines.append("  (the baseline has no calibration of its machine: figures from another machine "
                     "compare unscaled; `make bench-baseline` records one)")
    note = load_note(_printed[0] if _printed else machine(), entry.get("machine"))
    if note and args is not None:
        lines.append(f"  {note}")
    if entry and args is not None and entry.get("args", []) != args:
        lines.append(f"  (the baseline was recorded with arguments {entry.get('args', [])}, "
                     f"this run has {args})")
    for name, value in figures.items():
        if name not in base:
            lines.append(f"  {name:<{width}} {value:>10.3g}   (no baseline)")
            continue
        change = value / base[name] - 1 if base[name] else float("nan")
        mark = moved(value, base[name], tolerance)
        flag = f"   MOVED {'up' if change > 0 else 'down'} (more than ±{tolerance:.0%})" if mark is not None else ""
        line = f"  {name:<{width}} {value:>10.3g}   baseline {base[name]:.3g} ({change:+.0%}){flag}"
        lines.append(line)
        if mark is not None:
            flagged.append(f"{bench}: {name.strip()} {base[name]:.3g} -> {value:.3g} ({change:+.0%})")
    return lines, flagged


def record(bench: str, figures: Mapping[str, float], *, reference: Mapping[str, float] | None = None,
           title: str = "CPU per unit of work") -> None:
    """Print ``figures`` (name with unit -> CPU per unit of work) beside the baseline, and hand
    them to ``python -m bench`` (``BENCH_RESULTS``)."""
    figures = {name: round(float(value), 4) for name, value in figures.items() if value == value}
    baseline = load_baseline()
    tolerance = float(baseline.get("tolerance", TOLERANCE))
    recorded = ((baseline.get("benches") or {}).get(bench) or {}).get("recorded", "")
    source = f"bench/baseline.json, {bench!r}" + (f" recorded {recorded}" if recorded else ": none yet")
    print(f"{title} (beside {source}):")
    speed = machine_speed_ms()
    lines, _ = comparison(bench, figures, baseline, tolerance=tolerance, args=run_arguments(), speed_ms=speed)
    for line in lines:
        print(line)
    drift = speed_drift_note(speed)
    if drift:
        print(drift)
    results = os.environ.get(RESULTS_ENV)
    if results:
        with open(results, "a") as out:
            out.write(json.dumps({"bench": bench, "cpu": figures, "reference": dict(reference or {}),
                                  "args": run_arguments(), "machine": _printed[0] if _printed else machine(),
                                  "speed_ms": speed,
                                  "at": datetime.now(UTC).isoformat(timespec="seconds")}) + "\n")
    sys.stdout.flush()


def read_results(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def write_baseline(results: list[dict[str, Any]], *, commit: str, path: Path = BASELINE) -> list[str]:
    """Merge a run's results into the baseline (each benchmark's entry replaced whole; the
    reference figures kept when the run has none); the names of the entries written."""
    baseline = load_baseline(path) or {}
    baseline.setdefault("about", "CPU per unit of work of each benchmark's headline figures; "
                                 "`make bench` flags a figure further than `tolerance` from "
                                 "here. Recorded on purpose: `make bench-baseline`.")
    baseline.setdefault("tolerance", TOLERANCE)
    benches = baseline.setdefault("benches", {})
    written = []
    for result in results:
        old = benches.get(result["bench"]) or {}
        entry = {"recorded": result["at"], "commit": commit, "machine": result["machine"],
                 "args": result["args"], "cpu": result["cpu"]}
        if result.get("speed_ms"):
            entry["speed_ms"] = result["speed_ms"]
        reference = result.get("reference") or old.get("reference")
        if reference:
            entry["reference"] = reference
        benches[result["bench"]] = entry
        written.append(result["bench"])
    baseline["benches"] = dict(sorted(benches.items()))
    path.write_text(json.dumps(baseline, indent=2, ensure_ascii=False) + "\n")
    return written


class Timed(NamedTuple):
    p50_ms: float  # server time
    p90_ms: float
    body: bytes  # the last one
    cpu_ms: float  # median CPU time of this process per request


def timed_get(client: Any, url: str, runs: int) -> Timed:
    """GET ``url`` ``runs`` times (``client``: Django's test ``Client``): the median and 90th percentile server time in ms, the last
    body (a streamed one read whole, as its time includes), and the median CPU per request."""
    times, cpu = [], []
    body = b""
    for _ in range(runs):
        started, cpu_started = time.perf_counter(), time.process_time()
        response = client.get(url)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
        assert response.status_code == 200, (url, response.status_code, body[:500])
    times.sort()
    return Timed(statistics.median(times), times[int(len(times) * 0.9) - 1], body, statistics.median(cpu))
