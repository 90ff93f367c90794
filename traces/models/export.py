"""Where a team's turns are exported to: its OpenTelemetry exporter (``traces.export``)."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from agentsite.crypto import decrypt, encrypt
from agentsite.models import Team


class TraceExporter(models.Model):
    """A team's OpenTelemetry exporter (``traces.export``): where its turns' spans go, with
    which headers, and how much content they carry (``traces.export.content``)."""

    class Content(models.TextChoices):
        OFF = "off", "Off: no prompts, answers, arguments or results"
        REDACTED = "redacted", "Redacted: scrubbed of credentials and cut to a length"
        FULL = "full", "Full: everything the trace stores"

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="trace_exporter")
    enabled = models.BooleanField(
        default=True, help_text="Send this team's turns. Off: nothing is sent, not even the "
                                "site's default exporter.")
    endpoint = models.CharField(
        max_length=500,
        help_text="The OTLP/HTTP endpoint: a base URL such as https://cloud.langfuse.com/api/public/otel "
                  "or http://phoenix:6006 (“/v1/traces” is added), or the full traces URL.")
    headers_encrypted = models.TextField(blank=True, editable=False)
    header_names = models.JSONField(default=list, blank=True, editable=False)
    content = models.CharField(
        max_length=8, choices=Content.choices, default=Content.OFF,
        help_text="Prompts, answers, tool arguments and results are opt-in.")
    max_field_chars = models.PositiveIntegerField(
        default=1000, validators=[MinValueValidator(16), MaxValueValidator(1_000_000)],
        help_text="Redacted: each text is cut to this many characters.")
    service_name = models.CharField(
        max_length=100, default="agentsite",
        help_text="The service name of the spans; Phoenix files them under a project of this name.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                   blank=True, related_name="+", editable=False)

    class Meta:
        verbose_name = "trace exporter"

    def __str__(self) -> str:
        return f"Exporter of {self.team}"

    def headers(self) -> dict[str, str]:
        if not self.headers_encrypted:
            return {}
        data = json.loads(decrypt(self.headers_encrypted))
        return {str(k): str(v) for k, v in data} if isinstance(data, list) else {}

    def set_headers(self, pairs: list[tuple[str, str]]) -> None:
        self.header_names = [name for name, _ in pairs]
        self.headers_encrypted = encrypt(json.dumps([[n, v] for n, v in pairs])) if pairs else ""


class PendingExport(models.Model):
    """An ended turn whose spans its team's exporter has not yet accepted (``traces.export.
    delivery``): written in the transaction that ends the turn, removed once the receiver
    accepted every span of it. ``sent_steps``: the steps (by ``seq``; ``-1`` the turn's own
    span) the receiver already accepted, which are not sent again. ``claimed_until``: a sender
    is on it until then (the worker that ended it, or the catch-up)."""

    trace = models.OneToOneField("traces.Trace", on_delete=models.CASCADE, primary_key=True,
                                 related_name="+")
    ended_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    sent_steps = models.JSONField(default=list, blank=True)
    tries = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["ended_at"], name="pending_export_ended")]

    def __str__(self) -> str:
        return f"Spans of trace {self.trace_id} not yet accepted"


class ExportState(models.Model):
    """How a team's spans are getting to its receiver (its own exporter, or the site's): shown
    on the exporter's page."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, primary_key=True, related_name="+")
    endpoint = models.CharField(max_length=500, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    # The catch-up tries again from then (backoff while the receiver fails).
    next_try_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)  # in a row
    given_up = models.PositiveIntegerField(default=0)  # turns dropped from a full backlog

    def __str__(self) -> str:
        return f"Export of {self.team_id}"
