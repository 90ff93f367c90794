"""``manage.py otel_backfill --since DATE [--until DATE] [--team NAME-OR-ID] [--dry-run]``: send
the ended turns of a date range to each team's OpenTelemetry exporter (its own, else the site's
default), as the live export would have: the same spans with the same ids, so receivers that
key spans by id (Phoenix, Langfuse) keep one copy of a turn that was already sent. A turn the
live export still owed (its receiver was down) is owed no more once sent here.

Turns are sent in batches through the same exporter (protobuf over OTLP/HTTP, retried with
backoff); a team without an exporter, or with export off, is skipped and said so. A team's own
endpoint goes through the outbound-network policy, as from the worker: one the policy refuses
(an address on this host or network, without ``OUTBOUND_ALLOWED_NETWORKS`` set for this command
as for the worker) is not tried, and the command says so and why. Spans not accepted make the
command fail (exit status 1), after the other teams' were sent."""

from __future__ import annotations

from datetime import datetime, time, timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from opentelemetry.sdk.trace.export import SpanExportResult

from agentsite.models import Team
from agentsite.outbound import base_url_problem
from traces.export.config import config_for, forget
from traces.export.sender import span_exporter
from traces.export.stored import trace_for_export, turn_spans
from traces.models import PendingExport, Trace

BATCH = 256


def _moment(text: str, option: str, *, end: bool = False) -> datetime:
    try:
        day = parse_date(text) if len(text.strip()) == 10 else None
        moment = None if day is not None else parse_datetime(text)
    except ValueError:  # well formed, but no such day
        day = moment = None
    if day is not None:  # a whole day: from its start, or (--until) to its end
        moment = datetime.combine(day + timedelta(days=1) if end else day, time.min)
    if moment is None:
        raise CommandError(f"{option}: “{text}” is not a date (YYYY-MM-DD) or a date and time.")
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment


class Command(BaseCommand):
    help = "Send the ended turns of a date range to the teams' OpenTelemetry exporters."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", required=True, help="First day (YYYY-MM-DD) or moment.")
        parser.add_argument("--until", help="Last day, included (default: now).")
        parser.add_argument("--team", help="Only this team (name or id).")
        parser.add_argument("--dry-run", action="store_true", help="Count, send nothing.")

    def handle(self, *args, **options) -> None:
        since = _moment(options["since"], "--since")
        until = _moment(options["until"], "--until", end=True) if options["until"] else timezone.now()
        if until <= since:
            raise CommandError("--until must be after --since.")
        traces = Trace.objects.filter(created_at__gte=since, created_at__lt=until,
                                      finished_at__isnull=False)
        if options["team"]:
            wanted = options["team"]
            team = Team.objects.filter(Q(name=wanted) | Q(pk=int(wanted) if wanted.isdigit() else 0)).first()
            if team is None:
                raise CommandError(f"--team: no team “{wanted}”.")
            traces = traces.filter(team=team)
        forget()
        sent = turns = lost = 0
        for team_id in traces.values_list("team_id", flat=True).distinct().order_by("team_id"):
            config = config_for(team_id)
            ids = list(traces.filter(team_id=team_id).order_by("created_at").values_list("pk", flat=True))
            if config is None:
                self.stdout.write(f"team {team_id}: {len(ids)} turn(s) skipped, no exporter is on")
                continue
            refused = base_url_problem(config.endpoint) if config.guarded else None
            if refused:
                lost += len(ids)
                self.stderr.write(f"team {team_id}: {len(ids)} turn(s) not sent: the outbound-network "
                                  f"policy refuses its exporter's endpoint {config.endpoint}. {refused}")
                continue
            exporter = None if options["dry_run"] else span_exporter(config)
            batch, of_turns, failed = [], [], 0
            for index, trace_id in enumerate(ids):
                trace = trace_for_export(trace_id)
                if trace is not None:
                    batch.extend(turn_spans(trace, config))
                    of_turns.append(trace_id)
                    turns += 1
                if batch and (len(batch) >= BATCH or index == len(ids) - 1):
                    failed += self._send(exporter, batch, of_turns)
                    sent += len(batch)
                    batch, of_turns = [], []
            if exporter is not None:
                exporter.shutdown()
            verb = "would send" if options["dry_run"] else "sent"
            self.stdout.write(f"team {team_id}: {len(ids)} turn(s), {verb} to {config.endpoint}"
                              + (f", {failed} span(s) refused or lost" if failed else ""))
            if failed:
                lost += failed
                self.stderr.write(f"team {team_id}: the receiver refused or missed {failed} span(s)")
        self.stdout.write(f"{turns} turn(s), {sent} span(s)" + (" (dry run)" if options["dry_run"] else ""))
        if lost:
            raise CommandError("some turns were not sent, or not accepted: see above.")

    @staticmethod
    def _send(exporter, batch: list, trace_ids: list[int]) -> int:
        """Send; the spans not accepted. Turns the receiver accepted are owed no more (the
        live export's catch-up does not send them again)."""
        if exporter is None:
            return 0
        if exporter.export(batch) != SpanExportResult.SUCCESS:
            return len(batch)
        PendingExport.objects.filter(trace_id__in=trace_ids).delete()
        return 0
