"""``manage.py catalogue_import <path-or-URL> [--apply] [--effective-from DATE]``: the community
model catalogue (``model_prices_and_context_window.json``, or our compact snapshot) into the
global price table. Without ``--apply`` it only prints the plan: what would be added, which
prices change (each a new version), what is unchanged and what is skipped, with the reason.

``--write-snapshot PATH`` writes the catalogue's usable rows in the compact form the shipped
seed (``traces/costs/catalogue/snapshot.json``) uses, instead of planning an import."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from traces.costs.catalogue import (
    CatalogueError,
    Plan,
    catalogue_apply,
    catalogue_fetch,
    catalogue_plan,
)


def _moment(text: str) -> datetime:
    moment = parse_datetime(text)
    if moment is None:
        day = parse_date(text)
        if day is None:
            raise CommandError(f"--effective-from: “{text}” is not a date (YYYY-MM-DD) or a date and time.")
        moment = datetime(day.year, day.month, day.day)
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment


def plan_lines(plan: Plan, *, verbose: bool) -> list[str]:
    lines = [f"Catalogue: {plan.catalogue.source or 'unnamed'}"
             + (f" ({plan.catalogue.version})" if plan.catalogue.version else ""),
             f"Prices per million tokens: input / output / cache write / cache read. Changed prices "
             f"are new versions from {plan.effective_from:%Y-%m-%d %H:%M %Z}; a new model's price "
             "holds for all its requests (there is no earlier one).", plan.summary()]
    for item in plan.adds:
        window = f" · window {item.entry.context_window:,}" if item.entry.context_window else ""
        lines.append(f"  add        {item.model}: {item.rates_text}{window}")
    for item in plan.changes:
        lines.append(f"  change     {item.model}: {item.current_rates_text} (v{item.current.version}) "
                     f"-> {item.rates_text}")
    for item in plan.unchanged:
        if item.limits_changed:
            lines.append(f"  limits     {item.model}: window {item.current.context_window} -> "
                         f"{item.entry.context_window}, output {item.current.max_output_tokens} -> "
                         f"{item.entry.max_output_tokens}")
        elif verbose:
            lines.append(f"  unchanged  {item.model}")
    for reason, keys in plan.skipped_by_reason():
        shown = keys if verbose else keys[:5]
        more = f", … ({len(keys) - len(shown)} more)" if len(keys) > len(shown) else ""
        lines.append(f"  skip       {reason}: {', '.join(shown)}{more}")
    return lines


class Command(BaseCommand):
    help = "Import prices and context windows from the community model catalogue (dry run unless --apply)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("location", help="model_prices_and_context_window.json: a path or an https URL")
        parser.add_argument("--apply", action="store_true", help="Write the plan to the global table.")
        parser.add_argument("--effective-from", default="",
                            help="When changed prices take effect (default: now).")
        parser.add_argument("--catalogue-version", default="",
                            help="The catalogue's version, kept with every row (e.g. “litellm 1.109.1”).")
        parser.add_argument("--source-name", default="",
                            help="How provenance names the catalogue (default: its URL or file name).")
        parser.add_argument("--write-snapshot", default="", metavar="PATH",
                            help="Write the usable rows as a compact snapshot instead of planning.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            catalogue = catalogue_fetch(options["location"], version=options["catalogue_version"])
        except CatalogueError as exc:
            raise CommandError(str(exc)) from exc
        catalogue.source = options["source_name"] or catalogue.source
        if options["write_snapshot"]:
            Path(options["write_snapshot"]).write_text(catalogue.to_json())
            self.stdout.write(f"Wrote {len(catalogue.entries)} models to {options['write_snapshot']}.")
            return
        effective = _moment(options["effective_from"]) if options["effective_from"] else None
        plan = catalogue_plan(catalogue, effective_from=effective)
        for line in plan_lines(plan, verbose=options["verbosity"] >= 2):
            self.stdout.write(line)
        if not options["apply"]:
            self.stdout.write("Dry run: nothing written. Run again with --apply to write it.")
            return
        report = catalogue_apply(plan)
        self.stdout.write(self.style.SUCCESS(report.summary()))
