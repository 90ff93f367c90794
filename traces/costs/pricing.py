"""Which price a model request is charged at.

The rule (never a fuzzy or sibling match: a model without a price is *unpriced*, never priced
like its neighbour):

1. Names are compared trimmed and case-insensitively.
2. **Exact**: the request's model is the row's ``model``.
3. **Alias**: it is one of the row's ``aliases``, or the row's model qualified with its vendor
   (``openai/gpt-4o``, as OpenRouter names it).
4. **Prefix** (flagged on the step): the row's model followed only by a *version suffix*, the
   longest such row winning: a date (``-2024-08-06``, ``-20250514``), a three or four digit
   revision (``-0613``, ``-002``), ``-latest``, ``:latest`` or ``@<anything>`` (Vertex). So
   ``gpt-4o-2024-08-06`` is priced as ``gpt-4o``, while ``gpt-4o-mini`` never is, nor is
   ``o1-preview`` priced as ``o1``. A row that declares ``prefix`` matches every name that
   starts with its model (for a team's family of local models), still flagged.
5. Between rows of the same strength, a team's own rows win over global ones, then rows for the
   request's provider kind over rows for any kind.
6. Each (scope, provider kind, model) has versions; the one in force at the request's time (the
   latest ``effective_from`` not after it, then the highest version) is used. A price that was
   not yet in force does not apply.
7. Rows for "any provider kind" never price the offline demo model: it costs nothing, and only
   a row of kind ``demo`` gives it a price (the shipped table has one at $0, "free (offline
   demo)").

``PriceTable`` holds the rows of the global table and of some teams, in memory, so a turn
prices every request without a query. ``price_table_for`` keeps a team's table per process and
reads it again only when the rows (or the team's providers) changed: one small query checks.
The rows are added, imported and exported by ``price_services``.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from agents.runtime.pricing import COST_QUANTUM, Price, Usage, cost_breakdown
from agentsite.models import Team

from ..models import ModelPrice

MatchKind = ModelPrice.Match
DEMO_KIND = "demo"
VERSION_SUFFIX = re.compile(r"(?:-\d{4}-\d{2}-\d{2}|-\d{8}|-\d{3,4}|-latest|:latest|@[\w.\-]+)")
_LEVEL = {MatchKind.EXACT: 0, MatchKind.ALIAS: 1, MatchKind.PREFIX: 2}


def normalize_model(name: str) -> str:
    return (name or "").strip().lower()


def is_version_suffix(rest: str) -> bool:
    """Whether ``rest`` (what follows a priced name) only names a version of that model."""
    return bool(rest) and VERSION_SUFFIX.fullmatch(rest) is not None


# -- rows in memory ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PriceRow:
    """A ``ModelPrice`` row as the matcher needs it."""

    id: int
    team_id: int | None
    provider_kind: str
    vendor: str
    model: str
    aliases: tuple[str, ...]
    prefix: bool
    price: Price
    effective_from: datetime
    version: int
    label: str = ""
    source_url: str = ""
    context_window: int | None = None
    max_output_tokens: int | None = None

    @classmethod
    def from_model(cls, row: ModelPrice) -> PriceRow:
        aliases = tuple(normalize_model(a) for a in (row.aliases or []) if isinstance(a, str) and a.strip())
        return cls(
            id=row.pk, team_id=row.team_id, provider_kind=row.provider_kind,
            vendor=normalize_model(row.vendor), model=normalize_model(row.model), aliases=aliases,
            prefix=row.prefix,
            price=Price(row.input_per_mtok, row.output_per_mtok, row.cache_write_per_mtok,
                        row.cache_read_per_mtok),
            effective_from=row.effective_from, version=row.version, label=row.label,
            source_url=row.source_url, context_window=row.context_window,
            max_output_tokens=row.max_output_tokens)

    @property
    def key(self) -> tuple[int | None, str, str]:
        return (self.team_id, self.provider_kind, self.model)

    @property
    def scope(self) -> str:
        return "team" if self.team_id else "global"

    def applies_to_kind(self, provider_kind: str) -> bool:
        if self.provider_kind:
            return self.provider_kind == provider_kind
        return provider_kind != DEMO_KIND

    def match_kind(self, name: str) -> tuple[MatchKind, int] | None:
        """How ``name`` (normalised) matches this row, with the matched prefix's length."""
        if name == self.model:
            return MatchKind.EXACT, len(self.model)
        if name in self.aliases:
            return MatchKind.ALIAS, len(name)
        bare = name
        if self.vendor and name.startswith(self.vendor + "/"):
            bare = name[len(self.vendor) + 1:]
            if bare == self.model or bare in self.aliases:
                return MatchKind.ALIAS, len(bare)
        if bare.startswith(self.model) and len(bare) > len(self.model):
            rest = bare[len(self.model):]
            if self.prefix or is_version_suffix(rest):
                return MatchKind.PREFIX, len(self.model)
        return None


@dataclass(frozen=True, slots=True)
class PriceMatch:
    row: PriceRow
    kind: MatchKind

    @property
    def price(self) -> Price:
        return self.row.price

    @property
    def flags(self) -> list[str]:
        return ["prefix"] if self.kind == MatchKind.PREFIX else []

    def describe(self) -> str:
        """For people: "price table: gpt-4o (global v1, exact match)"."""
        label = f" — {self.row.label}" if self.row.label else ""
        return (f"price table: {self.row.model}{label} ({self.row.scope} v{self.row.version}, "
                f"{self.kind.value} match)")


@dataclass(frozen=True, slots=True)
class StepCost:
    """A model request's cost and the price behind it; ``match`` is None when unpriced."""

    cost: Decimal
    match: PriceMatch | None

    @property
    def unpriced(self) -> bool:
        return self.match is None

    @property
    def price_id(self) -> int | None:
        return self.match.row.id if self.match else None

    @property
    def match_kind(self) -> str:
        return self.match.kind.value if self.match else ""


@dataclass
class PriceTable:
    """Price rows (the global table and some teams' own) and, optionally, the provider kinds of
    those teams' providers by name, for requests that report only a provider's name."""

    rows: list[PriceRow] = field(default_factory=list)
    provider_kinds: Mapping[tuple[int, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        versions: dict[tuple[int | None, str, str], list[PriceRow]] = {}
        for row in self.rows:
            versions.setdefault(row.key, []).append(row)
        for group in versions.values():
            group.sort(key=lambda r: (r.effective_from, r.version))
        self._versions = versions
        # What is in force only changes at these moments; lookups are memoised between them
        # (re-pricing a month of steps asks the same few questions a million times).
        self._moments = sorted({r.effective_from for r in self.rows})
        self._in_force: dict[int, list[PriceRow]] = {}
        self._matches: dict[tuple[int, int | None, str, str], PriceMatch | None] = {}
        self._limits: PriceTable | None = None

    def kind_of(self, *, team_id: int | None, provider_name: str) -> str | None:
        return self.provider_kinds.get((team_id or 0, provider_name))

    def _period(self, at: datetime) -> int:
        return bisect.bisect_right(self._moments, at)

    def in_force(self, at: datetime) -> list[PriceRow]:
        """Per (scope, kind, model), the version in force at ``at``."""
        period = self._period(at)
        chosen = self._in_force.get(period)
        if chosen is None:
            chosen = []
            for group in self._versions.values():
                current = None
                for row in group:
                    if row.effective_from <= at:
                        current = row
                if current is not None:
                    chosen.append(current)
            self._in_force[period] = chosen
        return chosen

    def match(self, *, provider_kind: str, model: str, team_id: int | None = None,
              at: datetime | None = None) -> PriceMatch | None:
        name = normalize_model(model)
        if not name:
            return None
        at = at or timezone.now()
        memo = (self._period(at), team_id, provider_kind, name)
        if memo in self._matches:
            return self._matches[memo]
        best: tuple[tuple[int, int, int, int, int], PriceRow, MatchKind] | None = None
        for row in self.in_force(at):
            if row.team_id is not None and row.team_id != team_id:
                continue
            if not row.applies_to_kind(provider_kind):
                continue
            found = row.match_kind(name)
            if found is None:
                continue
            kind, length = found
            rank = (_LEVEL[kind], -length, 0 if row.team_id else 1, 0 if row.provider_kind else 1,
                    row.id)
            if best is None or rank < best[0]:
                best = (rank, row, kind)
        result = PriceMatch(best[1], best[2]) if best else None
        self._matches[memo] = result
        return result

    def cost(self, *, provider_kind: str, model: str, usage: Usage, team_id: int | None = None,
             at: datetime | None = None) -> StepCost:
        match = self.match(provider_kind=provider_kind, model=model, team_id=team_id, at=at)
        if match is None:
            return StepCost(Decimal(0), None)
        return StepCost(cost_breakdown(usage, match.price).total, match)

    def current_rows(self, *, team_id: int | None, at: datetime | None = None) -> list[PriceRow]:
        """The rows in force now that a team may use, for choosing "price under model X"."""
        at = at or timezone.now()
        return sorted((r for r in self.in_force(at) if r.team_id in (None, team_id)),
                      key=lambda r: (r.vendor, r.model, r.team_id or 0))

    def row(self, row_id: int) -> PriceRow | None:
        return next((r for r in self.rows if r.id == row_id), None)

    def with_limits(self) -> PriceTable:
        """The rows that know a model's context window or output limit, as a table of their own
        (kept with this one)."""
        if self._limits is None:
            self._limits = PriceTable([r for r in self.rows if r.context_window is not None
                                       or r.max_output_tokens is not None])
        return self._limits


def price_table_load(*, team_ids: Iterable[int | None] = (), with_providers: bool = False) -> PriceTable:
    """The global table and the given teams' rows (one query; two ``with_providers``)."""
    ids = sorted({t for t in team_ids if t})
    rows = [PriceRow.from_model(r) for r in
            ModelPrice.objects.filter(Q(team__isnull=True) | Q(team_id__in=ids))]
    kinds: dict[tuple[int, str], str] = {}
    if with_providers and ids:
        # Through the teams' own relation: the providers' app builds on this one.
        for team_id, name, kind in Team.objects.filter(pk__in=ids, providers__isnull=False).values_list(
                "pk", "providers__name", "providers__kind"):
            kinds[(team_id, name)] = kind
    return PriceTable(rows, kinds)


# Each process's tables, by (team, with providers): the stamp they were read at and the table.
_TABLES: dict[tuple[int, bool], tuple[tuple[Any, ...], PriceTable]] = {}
_TABLES_LOCK = threading.Lock()
TABLES_KEPT = 512


def price_table_for(team_id: int | None, *, with_providers: bool = False) -> PriceTable:
    """The global table and the team's rows (and its providers' kinds by name), read once per
    process and read again only when a row was added, changed or removed since (one small
    query compares ``price_stamp``). A team without rows of its own shares the process's copy
    of the global table. Tables are shared: do not change one."""
    stamp = price_stamp(team_id, with_providers=with_providers)
    own = stamp[3] > 0 or with_providers  # the team's rows, or its providers' kinds
    key = (team_id or 0, with_providers) if own else (0, False)
    kept = _TABLES.get(key)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    # Read after the stamp: a change in between makes the next call read it again.
    table = price_table_load(team_ids=[team_id] if own else [], with_providers=with_providers)
    with _TABLES_LOCK:
        if len(_TABLES) >= TABLES_KEPT:
            _TABLES.clear()
        _TABLES[key] = (stamp, table)
    return table


def price_stamp(team_id: int | None, *, with_providers: bool = False) -> tuple[Any, ...]:
    """What changes whenever the rows ``price_table_for`` reads change: how many there are, the
    newest id and the latest change (rows are created, edited in place for their limits and
    labels, or deleted) of the global table, then of the team's rows, then of the team's
    providers."""
    prices = connection.ops.quote_name(ModelPrice._meta.db_table)
    parts, params = [], []
    for rows, values in ((f"FROM {prices} WHERE team_id IS NULL", []),
                         (f"FROM {prices} WHERE team_id = %s", [team_id or 0])):
        parts += [f"SELECT COUNT(*) {rows}", f"SELECT MAX(id) {rows}", f"SELECT MAX(updated_at) {rows}"]
        params += values * 3
    if with_providers:
        providers = connection.ops.quote_name(Team._meta.get_field("providers").related_model._meta.db_table)
        theirs = f"FROM {providers} WHERE team_id = %s"
        parts += [f"SELECT COUNT(*) {theirs}", f"SELECT MAX(updated_at) {theirs}"]
        params += [team_id or 0] * 2
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(f"({part})" for part in parts), params)  # noqa: S608 - model table names, values as parameters
        return tuple(cursor.fetchone())


# -- one model request ------------------------------------------------------------------------------
def step_price(*, provider_kind: str, model: str, team_id: int | None = None,
               at: datetime | None = None, table: PriceTable | None = None) -> tuple[Price | None, str]:
    """The price of one model request and where it comes from (for people: "price table:
    gpt-4o (global v1, exact match)"), or (None, "") when the model has no price. Every cost
    figure is priced by the rule above; without ``table`` the team's table is loaded (one
    query)."""
    table = table if table is not None else price_table_for(team_id)
    match = table.match(provider_kind=provider_kind, model=model, team_id=team_id, at=at)
    if match is None:
        return None, ""
    return match.price, match.describe()


def step_cost(*, provider_kind: str, model: str, usage: Usage, team_id: int | None = None,
              at: datetime | None = None, table: PriceTable | None = None) -> tuple[Decimal, bool]:
    """The cost of one model request and whether it is unpriced (no price: 0, never a
    neighbour's price)."""
    table = table if table is not None else price_table_for(team_id)
    priced = table.cost(provider_kind=provider_kind, model=model, usage=usage, team_id=team_id, at=at)
    return priced.cost, priced.unpriced


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """What a model can hold, and the row that says so."""

    context_window: int | None
    max_output_tokens: int | None
    match: PriceMatch


def model_limits(model: str, provider_kind: str = "", *, team_id: int | None = None) -> ModelLimits | None:
    """The context window and output limit of ``model`` from the price table (the catalogue's
    rows, or a team's own), found by the same rule as its price: exact name, alias, version
    suffix, never a sibling. Only rows that know a limit take part."""
    table = price_table_for(team_id).with_limits()
    found = table.match(provider_kind=provider_kind, model=model, team_id=team_id)
    if found is None and provider_kind == DEMO_KIND:
        # Rows for any kind never *price* the offline demo provider's requests; what a model
        # name can hold is the same whoever serves it.
        found = table.match(provider_kind="", model=model, team_id=team_id)
    if found is None:
        return None
    return ModelLimits(found.row.context_window, found.row.max_output_tokens, found)


def cost_units(amount: Decimal | None) -> int:
    """A cost as an integer number of 1e-10 USD (how roll-ups keep it exactly)."""
    if not amount:
        return 0
    return int((Decimal(amount) / COST_QUANTUM).to_integral_value())


def units_usd(units: int | None) -> Decimal:
    return (Decimal(units or 0) * COST_QUANTUM).quantize(COST_QUANTUM)
