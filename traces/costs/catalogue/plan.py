"""What importing a catalogue would change in the global price table, and applying it.

The plan compares each catalogue entry with the global table's latest row for the same model
(rows for any provider kind, as the shipped table keeps them):

* **add**: the table has no such model: its first row is in force from ``FIRST_PRICE_FROM``
  (the catalogue does not say since when a price holds, and there is no earlier price to keep,
  so requests recorded before the import, re-priced, get the only price known);
* **change**: the rates differ: a *new version* effective from the import date, carrying the
  current row's aliases, prefix and label; the old version stays for the costs it priced;
* **unchanged**: same rates (a changed context window or output limit is updated in place:
  those are facts about the model, not versioned prices);
* **skip**: the catalogue row is unusable (with the reason), or a later price is already
  scheduled in the table.

Only global rows are read and written: a team's own rows are never touched (and keep winning
over the global ones where they match). Every row written carries its provenance: the
catalogue's link for the model (``source_url``), the catalogue entry and the date read
(``source_note``), and ``catalogue_source`` / ``catalogue_version`` / ``catalogue_read_at``.

The functions take the model class, so a migration can pass its historical one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from django.db import transaction
from django.utils import timezone

from traces.models import ModelPrice

from .read import Catalogue, Entry

SOURCE_URL_MAX = 200  # ModelPrice.source_url
FIRST_PRICE_FROM = datetime(2000, 1, 1, tzinfo=UTC)
NOTE_MAX = 200


class Action(StrEnum):
    ADD = "add"
    CHANGE = "change"
    UNCHANGED = "unchanged"
    SKIP = "skip"


def rates_text(values: tuple[Decimal | None, ...]) -> str:
    """Input / output / cache write / cache read, per million tokens."""
    return " / ".join("as input" if v is None else f"${v.normalize():f}" for v in values)


@dataclass(frozen=True, slots=True)
class Current:
    """The global table's latest row for a model, as the plan shows it."""

    id: int
    version: int
    effective_from: datetime
    rates: tuple[Decimal | None, ...]
    context_window: int | None
    max_output_tokens: int | None


@dataclass(frozen=True, slots=True)
class PlanItem:
    action: Action
    key: str
    entry: Entry | None = None
    current: Current | None = None
    reason: str = ""

    @property
    def model(self) -> str:
        return self.entry.model if self.entry else self.key

    @property
    def rates_text(self) -> str:
        return rates_text(self.entry.rates) if self.entry else ""

    @property
    def current_rates_text(self) -> str:
        return rates_text(self.current.rates) if self.current else ""

    @property
    def limits_changed(self) -> bool:
        return bool(self.entry and self.current and (
            (self.entry.context_window, self.entry.max_output_tokens)
            != (self.current.context_window, self.current.max_output_tokens)))


@dataclass
class Plan:
    catalogue: Catalogue
    effective_from: datetime
    items: list[PlanItem] = field(default_factory=list)

    def of(self, action: Action) -> list[PlanItem]:
        return [i for i in self.items if i.action == action]

    @property
    def adds(self) -> list[PlanItem]:
        return self.of(Action.ADD)

    @property
    def changes(self) -> list[PlanItem]:
        return self.of(Action.CHANGE)

    @property
    def unchanged(self) -> list[PlanItem]:
        return self.of(Action.UNCHANGED)

    @property
    def skipped(self) -> list[PlanItem]:
        return self.of(Action.SKIP)

    @property
    def writes(self) -> bool:
        return bool(self.adds or self.changes or any(i.limits_changed for i in self.unchanged))

    def skipped_by_reason(self) -> list[tuple[str, list[str]]]:
        groups: dict[str, list[str]] = {}
        for item in self.skipped:
            groups.setdefault(item.reason, []).append(item.key)
        return sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))

    def summary(self) -> str:
        limits = sum(1 for i in self.unchanged if i.limits_changed)
        text = (f"{len(self.adds)} to add, {len(self.changes)} price changes (new versions), "
                f"{len(self.unchanged)} unchanged")
        if limits:
            text += f" ({limits} with new limits)"
        text += f", {len(self.skipped)} skipped"
        if self.catalogue.other_providers:
            text += f"; {self.catalogue.other_providers} rows of other providers left out"
        return text + "."

    def digest(self) -> str:
        """Identifies what applying would do, to tell whether the table moved since a preview."""
        parts = [self.effective_from.isoformat()]
        for i in self.items:
            rates = i.entry.rates if i.entry else ()
            limits = (i.entry.context_window, i.entry.max_output_tokens) if i.entry else ()
            parts.append(f"{i.action}|{i.key}|{rates}|{limits}|{i.current.id if i.current else ''}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _current(row: Any) -> Current:
    return Current(id=row.pk, version=row.version, effective_from=row.effective_from,
                   rates=(row.input_per_mtok, row.output_per_mtok, row.cache_write_per_mtok,
                          row.cache_read_per_mtok),
                   context_window=row.context_window, max_output_tokens=row.max_output_tokens)


def _latest_global(model: Any) -> dict[str, Any]:
    latest: dict[str, Any] = {}
    for row in model.objects.filter(team__isnull=True, provider_kind="").order_by(
            "effective_from", "version"):
        latest[row.model.strip().lower()] = row
    return latest


def catalogue_plan(catalogue: Catalogue, *, effective_from: datetime | None = None,
                   model: Any = None) -> Plan:
    """What importing ``catalogue`` would do, effective from ``effective_from`` (now)."""
    model = model or ModelPrice
    plan = Plan(catalogue, effective_from or timezone.now())
    latest = _latest_global(model)
    for entry in catalogue.entries:
        row = latest.get(entry.model.lower())
        if row is None:
            plan.items.append(PlanItem(Action.ADD, entry.key, entry))
            continue
        current = _current(row)
        if tuple(current.rates) == entry.rates:
            plan.items.append(PlanItem(Action.UNCHANGED, entry.key, entry, current))
        elif current.effective_from > plan.effective_from:
            plan.items.append(PlanItem(
                Action.SKIP, entry.key, entry, current,
                f"a later price is already in the table (v{current.version}, from "
                f"{current.effective_from:%Y-%m-%d}); not replaced"))
        else:
            plan.items.append(PlanItem(Action.CHANGE, entry.key, entry, current))
    plan.items.extend(PlanItem(Action.SKIP, s.key, reason=s.reason) for s in catalogue.skipped)
    return plan


@dataclass
class ApplyReport:
    created: list[Any] = field(default_factory=list)
    limits_updated: int = 0
    unchanged: int = 0

    def summary(self) -> str:
        added = len(self.created)
        text = f"{added} price row{'s' if added != 1 else ''} added from the catalogue"
        if self.limits_updated:
            text += f", {self.limits_updated} context window{'s' if self.limits_updated != 1 else ''} updated"
        if self.unchanged:
            text += f", {self.unchanged} unchanged"
        return text + "."


def provenance(entry: Entry, catalogue: Catalogue, read_at: datetime) -> dict[str, Any]:
    source = catalogue.source
    link = entry.source if len(entry.source) <= SOURCE_URL_MAX else ""
    if not link and source.startswith("https://") and " " not in source and len(source) <= SOURCE_URL_MAX:
        link = source
    version = f" ({catalogue.version})" if catalogue.version else ""
    note = f"Community catalogue{version}, entry “{entry.key}”, read {read_at:%Y-%m-%d}."
    if entry.note:
        note += f" {entry.note}"
    return {"source_url": link, "source_note": note[:NOTE_MAX], "catalogue_source": source[:300],
            "catalogue_version": catalogue.version[:50], "catalogue_read_at": read_at}


def edited_now(model: Any) -> dict[str, Any]:
    """The ``updated_at`` of an update in place of price rows, which ``.update()`` does not set
    (a migration's historical model may have no such field)."""
    if any(f.name == "updated_at" for f in model._meta.get_fields()):
        return {"updated_at": timezone.now()}
    return {}


def catalogue_apply(plan: Plan, *, actor: Any = None, model: Any = None) -> ApplyReport:
    """Write ``plan`` to the global table (in one transaction)."""
    model = model or ModelPrice
    report = ApplyReport()
    read_at = plan.catalogue.read_at or timezone.now()
    with transaction.atomic():
        for item in plan.items:
            entry = item.entry
            if entry is None or item.action == Action.SKIP:
                continue
            if item.action == Action.UNCHANGED:
                report.unchanged += 1
                if item.limits_changed and item.current is not None:
                    model.objects.filter(pk=item.current.id).update(
                        context_window=entry.context_window, max_output_tokens=entry.max_output_tokens,
                        **edited_now(model))
                    report.limits_updated += 1
                continue
            name = entry.model
            carried: dict[str, Any] = {"aliases": [], "prefix": False, "label": ""}
            if item.current is not None:
                previous = model.objects.get(pk=item.current.id)
                name = previous.model  # the same model, as the table already spells it
                carried = {"aliases": list(previous.aliases or []), "prefix": previous.prefix,
                           "label": previous.label}
            versions = model.objects.filter(team__isnull=True, provider_kind="", model=name)
            values: dict[str, Any] = {
                "team": None, "provider_kind": "", "vendor": entry.vendor, "model": name,
                **carried,
                "input_per_mtok": entry.input, "output_per_mtok": entry.output,
                "cache_write_per_mtok": entry.cache_write, "cache_read_per_mtok": entry.cache_read,
                "effective_from": plan.effective_from if item.current is not None else FIRST_PRICE_FROM,
                "version": max(versions.values_list("version", flat=True), default=0) + 1,
                "context_window": entry.context_window, "max_output_tokens": entry.max_output_tokens,
                **provenance(entry, plan.catalogue, read_at)}
            if actor is not None and getattr(actor, "is_authenticated", False) and model is ModelPrice:
                values["created_by"] = actor
            report.created.append(model.objects.create(**values))
    return report
