"""The price table's services: a price's next version (``price_create``), and the table as a
JSON document (``price_export``) read back by ``price_import``. Rates are never edited in place:
each change is a new row (``traces.models.ModelPrice``); how a request finds its row is
``pricing``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from ..models import ModelPrice

EXPORT_FORMAT = "agentsite.prices/1"

def next_version(*, team_id: int | None, provider_kind: str, model: str) -> int:
    current = (ModelPrice.objects.filter(team_id=team_id, provider_kind=provider_kind, model=model)
               .aggregate(v=Max("version"))["v"])
    return (current or 0) + 1


def price_create(*, values: Mapping[str, Any], team_id: int | None, actor: Any = None) -> ModelPrice:
    """A new price row (the next version of its model in its scope)."""
    row = ModelPrice(team_id=team_id, **values)
    row.model = row.model.strip()
    row.version = next_version(team_id=team_id, provider_kind=row.provider_kind, model=row.model)
    if actor is not None and getattr(actor, "is_authenticated", False):
        row.created_by = actor
    if row.effective_from is None:
        row.effective_from = timezone.now()
    row.full_clean(exclude=["created_by"])
    row.save()
    return row


def price_export(*, rows: Iterable[ModelPrice]) -> dict[str, Any]:
    """Rows as the JSON document ``price_import`` reads back."""
    def num(value: Decimal | None) -> str | None:
        return None if value is None else format(value.normalize(), "f")

    return {
        "format": EXPORT_FORMAT,
        "exported_at": timezone.now().isoformat(),
        "prices": [{
            "scope": "global" if r.team_id is None else "team",
            "provider_kind": r.provider_kind, "vendor": r.vendor, "model": r.model,
            "aliases": list(r.aliases or []), "prefix": r.prefix,
            "input": num(r.input_per_mtok), "output": num(r.output_per_mtok),
            "cache_write": num(r.cache_write_per_mtok), "cache_read": num(r.cache_read_per_mtok),
            "effective_from": r.effective_from.isoformat(), "version": r.version,
            "label": r.label, "source_url": r.source_url, "source_note": r.source_note,
        } for r in rows],
    }


@dataclass
class ImportReport:
    created: list[ModelPrice] = field(default_factory=list)
    unchanged: int = 0
    skipped_global: int = 0

    def summary(self) -> str:
        parts = [f"{len(self.created)} price row{'s' if len(self.created) != 1 else ''} added"]
        if self.unchanged:
            parts.append(f"{self.unchanged} already present")
        if self.skipped_global:
            parts.append(f"{self.skipped_global} global row{'s' if self.skipped_global != 1 else ''} "
                         "skipped (only site admins change the global table)")
        return ", ".join(parts) + "."


def _decimal(item: Mapping[str, Any], name: str, *, required: bool) -> Decimal | None:
    value = item.get(name)
    if value is None or value == "":
        if required:
            raise ValueError(f"“{name}” is required")
        return None
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ValueError(f"“{name}” must be a number of dollars per million tokens") from None
    if not number.is_finite() or number < 0:
        raise ValueError(f"“{name}” must be a number of dollars per million tokens")
    return number


def _moment(value: Any) -> datetime:
    text = str(value or "").strip()
    moment = parse_datetime(text) if text else None
    if moment is None and text:
        day = parse_date(text)
        if day is not None:
            moment = datetime(day.year, day.month, day.day)
    if moment is None:
        raise ValueError("“effective_from” must be a date or a date and time")
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_current_timezone())
    return moment


def _import_values(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ValueError("each price must be an object")
    model = str(item.get("model") or "").strip()
    if not model:
        raise ValueError("“model” is required")
    aliases = item.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ValueError("“aliases” must be a list of names")
    return {
        "provider_kind": str(item.get("provider_kind") or "").strip()[:16],
        "vendor": str(item.get("vendor") or "").strip()[:32],
        "model": model[:200], "aliases": [a.strip() for a in aliases if a.strip()],
        "prefix": bool(item.get("prefix")),
        "input_per_mtok": _decimal(item, "input", required=True),
        "output_per_mtok": _decimal(item, "output", required=True),
        "cache_write_per_mtok": _decimal(item, "cache_write", required=False),
        "cache_read_per_mtok": _decimal(item, "cache_read", required=False),
        "effective_from": _moment(item.get("effective_from")),
        "label": str(item.get("label") or "")[:100],
        "source_url": str(item.get("source_url") or "")[:200],
        "source_note": str(item.get("source_note") or "")[:200],
    }


def _same_row(team_id: int | None, values: Mapping[str, Any]) -> bool:
    rows = ModelPrice.objects.filter(team_id=team_id, provider_kind=values["provider_kind"],
                                     model=values["model"], effective_from=values["effective_from"])
    keys = ("vendor", "aliases", "prefix", "input_per_mtok", "output_per_mtok",
            "cache_write_per_mtok", "cache_read_per_mtok")
    return any(all(getattr(r, k) == values[k] for k in keys) for r in rows)


def price_import(*, data: Any, team_id: int | None, allow_global: bool, actor: Any = None) -> ImportReport:
    """Add the prices of an export document (or a bare list of them) as new rows: a team's own
    rows with ``team_id``, and the rows marked global only when ``allow_global``. A row that is
    already present (same scope, model, date and rates) is not added again; nothing is written
    when any row is invalid (``ValidationError`` lists them)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise ValidationError(f"The file is not JSON: {exc}") from exc
    items = data.get("prices") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValidationError("Expected a JSON list of prices, or an export with a “prices” list.")
    parsed: list[tuple[int | None, dict[str, Any]]] = []
    errors = []
    report = ImportReport()
    for index, item in enumerate(items, start=1):
        try:
            values = _import_values(item)
        except ValueError as exc:
            errors.append(f"Price {index}: {exc}.")
            continue
        is_global = isinstance(item, dict) and item.get("scope") == "global"
        if is_global and not allow_global:
            report.skipped_global += 1
            continue
        target = None if is_global or team_id is None else team_id
        if target is None and not allow_global:
            errors.append(f"Price {index}: choose a team to import into.")
            continue
        parsed.append((target, values))
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        for target, values in parsed:
            if _same_row(target, values):
                report.unchanged += 1
                continue
            report.created.append(price_create(values=values, team_id=target, actor=actor))
    return report
