"""The compare page: two traces side by side, aligned step by step, their first divergence
explained at the top, totals and answers compared (``traces.debug.compare``). Both traces must be
ones the person may see in the inspector; any other is a 404."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from agentsite.access import team_required
from agentsite.templatetags.agentsite import duration, usd

from ..models import Trace
from ..record import selectors
from .compare import Comparison, Pair, TotalRow
from .compare_selectors import folded_pairs, fork_start, trace_comparison

# Lines of the aligned table rendered at once (a longer table ends in a line that loads more).
MAX_ROWS = 1_500
UUID_IN_TEXT = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
RANGE = re.compile(r"^(\d{1,7})-(\d{1,7})$")


@dataclass(slots=True)
class Fold:
    """A run of equal pairs shown as one line (positions ``start``..``end``, inclusive)."""

    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start + 1


def fold(pairs: Sequence[Pair], *, context: int = 3) -> list[Pair | Fold]:
    """The pairs with long runs of equal ones folded, keeping ``context`` pairs next to each
    difference."""
    out: list[Pair | Fold] = []
    run: list[Pair] = []

    def flush(at_end: bool) -> None:
        head = context if out else 0
        tail = 0 if at_end else context
        if len(run) > head + tail + 1:
            out.extend(run[:head])
            out.append(Fold(run[head].position, run[len(run) - tail - 1].position))
            out.extend(run[len(run) - tail:] if tail else [])
        else:
            out.extend(run)
        run.clear()

    for pair in pairs:
        if pair.state in ("same", "matched"):
            run.append(pair)
            continue
        flush(at_end=False)
        out.append(pair)
    flush(at_end=True)
    return out


def trace_uuid_in(text: str) -> uuid.UUID | None:
    """The trace id in what was typed: the id itself, or an inspector address that holds it."""
    found = UUID_IN_TEXT.search(text or "")
    return uuid.UUID(found.group(0)) if found else None


def compared_traces(request: HttpRequest, a: uuid.UUID, b: uuid.UUID) -> tuple[Trace, Trace]:
    qs = Trace.objects.select_related("agent", "conversation", "user_message")
    return (selectors.trace_get_or_404(request.membership, qs, uuid=a),
            selectors.trace_get_or_404(request.membership, qs, uuid=b))


@team_required()
@require_GET
def trace_compare(request: HttpRequest) -> HttpResponse:
    raw_a, raw_b = request.GET.get("a", "").strip(), request.GET.get("b", "").strip()
    ua, ub = trace_uuid_in(raw_a), trace_uuid_in(raw_b)
    if ua is None or ub is None:
        error = ""
        if raw_a or raw_b:
            error = "Give two trace ids (or inspector addresses) to compare."
        return render(request, "traces/compare.html", {"form_only": True, "error": error, "a": raw_a, "b": raw_b},
                      status=400 if error else 200)
    a, b = compared_traces(request, ua, ub)
    base = {"a": a, "b": b, "a_url": reverse("trace_detail", args=[a.uuid]),
            "b_url": reverse("trace_detail", args=[b.uuid]),
            "query": f"a={a.uuid}&b={b.uuid}"}
    rows = RANGE.match(request.GET.get("rows", ""))
    if rows:
        return _rows(request, base, int(rows.group(1)), int(rows.group(2)))
    comparison = trace_comparison(a, b)
    items = fold(comparison.pairs)
    if len(items) > MAX_ROWS:
        rest = items[MAX_ROWS]
        start = rest.start if isinstance(rest, Fold) else rest.position
        items = [*items[:MAX_ROWS], Fold(start, len(comparison.pairs))]
    divergence = comparison.divergence
    context = {
        **base, "comparison": comparison, "items": items, "divergence": divergence,
        "div": divergence.position if divergence else "",
        "totals": [_display(row) for row in comparison.totals],
        "tools": [_display(row) for row in comparison.tools],
        "differing_totals": sum(1 for row in comparison.totals if row.differs),
        "counts": comparison_summary(comparison),
        "fork_note": _fork_note(a, b),
    }
    return render(request, "traces/compare.html", context)


def _rows(request: HttpRequest, base: dict[str, Any], start: int, end: int) -> HttpResponse:
    """The lines of a folded run (or of the rest of a long table), loaded on demand."""
    try:
        divergence = int(request.GET.get("d", "")) or None
    except ValueError:
        divergence = None
    end = max(start, end)
    last = min(end, start + MAX_ROWS - 1)
    items: list[Any] = folded_pairs(base["a"], base["b"], start=start, end=last, divergence=divergence)
    if last < end:
        items.append(Fold(last + 1, end))
    return render(request, "traces/compare.html#rows", {**base, "items": items, "div": divergence or ""})


def _display(row: TotalRow) -> dict[str, Any]:
    def show(value: Any) -> str:
        if value is None:
            return "—"
        if row.key == "cost_usd":
            return usd(value)
        if row.key == "duration_ms":
            return duration(value)
        return f"{value:,}"

    diff = row.difference
    if diff is None or not row.differs:
        change = ""
    elif row.key == "cost_usd":
        change = ("+" if diff > 0 else "−") + usd(abs(Decimal(diff)))
    elif row.key == "duration_ms":
        change = ("+" if diff > 0 else "−") + duration(abs(diff))
    else:
        change = f"{diff:+,}".replace("-", "−")
    return {"label": row.label, "a": show(row.a), "b": show(row.b), "change": change, "differs": row.differs}


def comparison_summary(comparison: Comparison) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pair in comparison.pairs:
        counts[pair.state] = counts.get(pair.state, 0) + 1
    return counts


def _fork_note(a: Trace, b: Trace) -> str:
    """What is compared when one run is a fork of the other."""
    start_a, start_b = fork_start(a, b)
    if start_a is not None:
        return (f"Run B is a fork of run A at step {start_a}: run A is compared from that step "
                "on, the steps before it being the same record. Totals are each run's own.")
    if start_b is not None:
        return (f"Run A is a fork of run B at step {start_b}: run B is compared from that step "
                "on, the steps before it being the same record. Totals are each run's own.")
    return ""
