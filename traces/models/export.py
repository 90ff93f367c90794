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
