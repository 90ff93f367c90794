"""Re-pricing: what recorded model requests would cost under another model's price, or under
the price table as it is now (after a price was corrected or added), beside what was recorded.

A preview writes nothing. History changes only through ``reprice_apply``, which an admin runs
to *correct* recorded costs to the current table: steps, their traces' totals and the cost
roll-ups are rewritten in one transaction, and an audit event records who did it and the
totals before and after. (Pricing history under another model is a what-if, never applied.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.runtime.pricing import Usage, cost_breakdown
from agentsite.audit import audit_record
from agentsite.models import AuditEvent, Team

from ..models import Step, Trace
from .cache_selectors import lost_units
from .pricing import MatchKind, PriceMatch, PriceRow, PriceTable
from .rollups import (
    FINISHED,
    TOKEN_FIELDS,
    TraceDims,
    ledger_apply,
    moves_of,
    step_share,
    trace_totals_from_steps,
)

STEP_COLUMNS = ("id", "trace_id", "seq", "model", "provider", "started_at", "cost_usd", "price_id",
                "price_match", "meta", "kind", "status", *TOKEN_FIELDS)
CHUNK = 2000


@dataclass(frozen=True)
class Target:
    """What to price with: "table" (each request's own model, in the current table, at the
    request's time) or one price row for every request."""

    row: PriceRow | None = None

    @property
    def is_table(self) -> bool:
        return self.row is None

    @property
    def value(self) -> str:
        return "table" if self.row is None else f"row:{self.row.id}"

    @property
    def label(self) -> str:
        if self.row is None:
            return "the current price table"
        return f"{self.row.model} ({self.row.scope} price v{self.row.version})"

    @classmethod
    def parse(cls, value: str, *, table: PriceTable, team_id: int) -> Target | None:
        value = (value or "table").strip()
        if value == "table":
            return cls()
        if value.startswith("row:") and value[4:].isdigit():
            row = next((r for r in table.current_rows(team_id=team_id) if r.id == int(value[4:])), None)
            return cls(row) if row is not None else None
        return None


def target_choices(table: PriceTable, *, team_id: int) -> list[tuple[str, str]]:
    """The rows in force that a team may price under, for a select."""
    choices = []
    for row in table.current_rows(team_id=team_id):
        rates = f"${row.price.input} in / ${row.price.output} out"
        scope = "team" if row.team_id else (row.vendor or "global")
        choices.append((f"row:{row.id}", f"{row.model} — {rates} ({scope})"))
    return choices


@dataclass
class StepPrice:
    cost: Decimal
    match: PriceMatch | None

    @property
    def key(self) -> tuple[Decimal, int | None, str]:
        return (self.cost, self.match.row.id if self.match else None,
                self.match.kind.value if self.match else "")


@dataclass
class StepRow:
    """One model request: what was recorded and what the target says."""

    step: Step
    recorded_label: str
    new: StepPrice

    @property
    def recorded(self) -> Decimal:
        return self.step.cost_usd or Decimal(0)

    @property
    def delta(self) -> Decimal:
        return self.new.cost - self.recorded

    @property
    def changed(self) -> bool:
        unpriced = bool((self.step.meta or {}).get("unpriced"))
        return ((self.recorded, self.step.price_id, self.step.price_match, unpriced)
                != (*self.new.key, self.new.match is None))

    @property
    def new_label(self) -> str:
        return describe(self.new.match)


def describe(match: PriceMatch | None) -> str:
    if match is None:
        return "no price (unpriced, counted as $0)"
    flag = "" if match.kind == MatchKind.EXACT else f", {match.kind.value} match"
    label = f", {match.row.label}" if match.row.label else ""
    return f"{match.row.model} ({match.row.scope} v{match.row.version}{flag}{label})"


def _recorded_label(step: Step, table: PriceTable) -> str:
    if (step.meta or {}).get("unpriced"):
        return describe(None)
    row = table.row(step.price_id) if step.price_id else None
    if row is None:
        return "recorded before the price table (no price row)"
    kind = MatchKind(step.price_match) if step.price_match in MatchKind.values else MatchKind.EXACT
    return describe(PriceMatch(row, kind))


def price_step(step: Step, *, target: Target, table: PriceTable, team_id: int,
               fallback_kind: str) -> StepPrice:
    usage = Usage(**{name: int(getattr(step, name) or 0) for name in TOKEN_FIELDS})
    if target.row is not None:
        return StepPrice(cost_breakdown(usage, target.row.price).total,
                         PriceMatch(target.row, MatchKind.EXACT))
    kind = table.kind_of(team_id=team_id, provider_name=step.provider) or fallback_kind
    priced = table.cost(provider_kind=kind, model=step.model, usage=usage, team_id=team_id,
                        at=step.started_at)
    return StepPrice(priced.cost, priced.match)


def _llm_steps(queryset: Any) -> Any:
    return queryset.filter(kind=Step.Kind.LLM_REQUEST, status__in=FINISHED).only(*STEP_COLUMNS)


# -- one trace ----------------------------------------------------------------------------------------
@dataclass
class TraceReprice:
    trace: Trace
    target: Target
    rows: list[StepRow]

    @property
    def recorded_total(self) -> Decimal:
        return sum((r.recorded for r in self.rows), Decimal(0))

    @property
    def new_total(self) -> Decimal:
        return sum((r.new.cost for r in self.rows), Decimal(0))

    @property
    def delta(self) -> Decimal:
        return self.new_total - self.recorded_total

    @property
    def changed(self) -> list[StepRow]:
        return [r for r in self.rows if r.changed]


def trace_reprice_preview(*, trace: Trace, target: Target, table: PriceTable) -> TraceReprice:
    steps = _llm_steps(Step.objects.filter(trace=trace)).order_by("seq")
    rows = [StepRow(step, _recorded_label(step, table),
                    price_step(step, target=target, table=table, team_id=trace.team_id,
                               fallback_kind=trace.provider_kind))
            for step in steps]
    return TraceReprice(trace, target, rows)


# -- a range of traces --------------------------------------------------------------------------------
@dataclass
class ModelLine:
    provider: str
    model: str
    calls: int = 0
    recorded: Decimal = Decimal(0)
    new: Decimal = Decimal(0)
    changed: int = 0

    @property
    def delta(self) -> Decimal:
        return self.new - self.recorded


@dataclass
class RangeReprice:
    team: Team
    date_from: date
    date_to: date
    target: Target
    lines: list[ModelLine] = field(default_factory=list)
    traces: int = 0

    @property
    def recorded_total(self) -> Decimal:
        return sum((line.recorded for line in self.lines), Decimal(0))

    @property
    def new_total(self) -> Decimal:
        return sum((line.new for line in self.lines), Decimal(0))

    @property
    def delta(self) -> Decimal:
        return self.new_total - self.recorded_total

    @property
    def calls(self) -> int:
        return sum(line.calls for line in self.lines)

    @property
    def changed(self) -> int:
        return sum(line.changed for line in self.lines)


def range_traces(*, team: Team, date_from: date, date_to: date) -> Any:
    """Finished traces of the team started in the range (days in ``TIME_ZONE``)."""
    zone = timezone.get_current_timezone()
    start = timezone.make_aware(datetime.combine(date_from, time.min), zone)
    end = timezone.make_aware(datetime.combine(date_to + timedelta(days=1), time.min), zone)
    return (Trace.objects.filter(team=team, created_at__gte=start, created_at__lt=end)
            .exclude(status__in=Trace.ACTIVE))


def _range_steps(traces: Any) -> Iterator[tuple[Step, str]]:
    kinds = dict(traces.values_list("pk", "provider_kind"))
    ids = sorted(kinds)
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start:start + CHUNK]
        for step in _llm_steps(Step.objects.filter(trace_id__in=chunk)).order_by("trace_id", "seq"):
            yield step, kinds.get(step.trace_id, "")


def range_reprice_preview(*, team: Team, date_from: date, date_to: date, target: Target,
                          table: PriceTable) -> RangeReprice:
    traces = range_traces(team=team, date_from=date_from, date_to=date_to)
    result = RangeReprice(team, date_from, date_to, target)
    lines: dict[tuple[str, str], ModelLine] = {}
    seen: set[int] = set()
    for step, kind in _range_steps(traces):
        seen.add(step.trace_id)
        new = price_step(step, target=target, table=table, team_id=team.pk, fallback_kind=kind)
        line = lines.setdefault((step.provider, step.model), ModelLine(step.provider, step.model))
        row = StepRow(step, "", new)
        line.calls += 1
        line.recorded += row.recorded
        line.new += new.cost
        line.changed += row.changed
    result.lines = sorted(lines.values(), key=lambda line: (-line.recorded, line.model))
    result.traces = len(seen)
    return result


# -- applying a correction ----------------------------------------------------------------------------
@dataclass
class Correction:
    traces: int = 0
    steps: int = 0
    before: Decimal = Decimal(0)
    after: Decimal = Decimal(0)


def _apply_rows(trace_rows: dict[int, list[StepRow]]) -> Correction:
    """Rewrite the changed steps, then each trace's totals and the roll-ups by the difference."""
    result = Correction()
    updated: list[Step] = []
    dims_of = {row["pk"]: row for row in Trace.objects.filter(pk__in=list(trace_rows)).values(
        "pk", "team_id", "agent_id", "user_id", "conversation_id", "api_key_id")}
    for trace_id, rows in trace_rows.items():
        changes = []
        for row in rows:
            result.before += row.recorded
            result.after += row.new.cost
            if not row.changed:
                continue
            step = row.step
            before = step_share(step)
            step.cost_usd = row.new.cost
            step.price_id = row.new.match.row.id if row.new.match else None
            step.price_match = row.new.match.kind.value if row.new.match else ""
            step.meta = {**(step.meta or {}), "unpriced": row.new.match is None,
                         "repriced_at": timezone.now().isoformat()}
            if step.meta.get("cache_lost_tokens"):  # what its cache miss cost, at the new price
                rates = row.new.match.row.price if row.new.match else None
                step.meta["cache_lost_units"] = lost_units(
                    int(step.meta["cache_lost_tokens"]), input_per_mtok=rates and rates.input,
                    cache_read_per_mtok=rates and rates.cache_read)
            changes.append((before, step_share(step)))
            updated.append(step)
        if not changes:
            continue
        d = dims_of[trace_id]
        dims = TraceDims(d["team_id"], d["agent_id"] or 0, d["user_id"] or 0, d["conversation_id"] or 0,
                         api_key_id=d["api_key_id"] or 0)
        ledger_apply(dims, moves_of(changes))
        result.traces += 1
        result.steps += len(changes)
    Step.objects.bulk_update(updated, ["cost_usd", "price", "price_match", "meta"], batch_size=500)

    for trace_id in {s.trace_id for s in updated}:
        totals = trace_totals_from_steps(trace_id)
        totals.pop("step_count")
        Trace.objects.filter(pk=trace_id).update(**totals)
    return result


def _totals_note(correction: Correction, *, before: bool) -> dict[str, Any]:
    return {"cost_usd": str(correction.before if before else correction.after),
            "steps_changed": correction.steps, "traces_changed": correction.traces}


@transaction.atomic
def trace_reprice_apply(*, trace: Trace, table: PriceTable, actor: Any) -> Correction:
    """Correct a finished trace's recorded costs to the current price table (audited)."""
    trace = Trace.objects.select_for_update().get(pk=trace.pk)
    if trace.is_active:
        raise ValueError("The turn is still running; correct its costs once it has ended.")
    preview = trace_reprice_preview(trace=trace, target=Target(), table=table)
    recorded_trace_cost = trace.cost_usd
    correction = _apply_rows({trace.pk: preview.rows})
    if correction.steps:
        trace.refresh_from_db(fields=["cost_usd"])
        audit_record(actor=actor, action=AuditEvent.Action.UPDATE, instance=trace, team=trace.team,
                     before={"cost_usd": str(recorded_trace_cost), "kind": "cost correction"},
                     after={"cost_usd": str(trace.cost_usd), "kind": "cost correction",
                            "steps_changed": correction.steps,
                            "price_table": "current"})
    return correction


@transaction.atomic
def range_reprice_apply(*, team: Team, date_from: date, date_to: date, table: PriceTable,
                        actor: Any) -> Correction:
    """Correct every finished trace of the team started in the range to the current price
    table, in one transaction, with one audit event for the whole correction."""
    traces = range_traces(team=team, date_from=date_from, date_to=date_to)
    by_trace: dict[int, list[StepRow]] = defaultdict(list)
    for step, kind in _range_steps(traces):
        new = price_step(step, target=Target(), table=table, team_id=team.pk, fallback_kind=kind)
        by_trace[step.trace_id].append(StepRow(step, "", new))
    correction = _apply_rows(dict(by_trace))
    if correction.steps:
        span = f"{date_from.isoformat()}..{date_to.isoformat()}"
        authenticated = getattr(actor, "is_authenticated", False)
        AuditEvent.objects.create(
            team=team, actor=actor if authenticated else None,
            actor_name=actor.get_username() if authenticated else "",
            action=AuditEvent.Action.UPDATE, object_type="traces.CostCorrection", object_id=span,
            object_repr=f"Cost correction of traces started {span}",
            before=_totals_note(correction, before=True),
            after=_totals_note(correction, before=False))
    return correction
