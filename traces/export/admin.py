"""The exporter page: a team's OpenTelemetry endpoint in the admin, scoped to the admin's teams
and audited. Headers are write-only (stored encrypted, never shown); the URL is checked
against the outbound-network policy on save and on every request. "Send a test span" posts
one span the way turns are sent and shows what the receiver answered."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from agentsite.admin_site import TeamScopedAdmin
from agentsite.audit import AuditedAdmin
from agentsite.crypto import SecretUnreadable
from agentsite.headers import header_lines_clean, headers_field
from agentsite.outbound import base_url_problem

from ..models import ExportState, TraceExporter
from . import config as export_config
from . import pipeline, probe
from .delivery import backlog_of

HEADERS_HELP = ("One header per line, as “Name: value”: Langfuse takes “Authorization: Basic …” "
                "(base64 of public-key:secret-key), Honeycomb “x-honeycomb-team: …”. Values are "
                "stored encrypted, sent only to this endpoint and never shown again.")


class TraceExporterForm(forms.ModelForm):
    headers = headers_field(HEADERS_HELP)
    clear_headers = forms.BooleanField(required=False, label="Remove the stored headers")

    class Meta:
        model = TraceExporter
        fields = ["team", "enabled", "endpoint", "content", "max_field_chars", "service_name"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "headers" in self.fields and self.instance.pk and self.instance.header_names:
            names = ", ".join(self.instance.header_names)
            self.fields["headers"].help_text = (f"{HEADERS_HELP} Stored: {names}. Leave empty to "
                                                "keep them; anything entered replaces all.")

    def clean_headers(self) -> list[tuple[str, str]]:
        return header_lines_clean(self.cleaned_data.get("headers"))

    def clean_endpoint(self) -> str:
        url = (self.cleaned_data.get("endpoint") or "").strip()
        problem = base_url_problem(url)
        if problem:
            raise forms.ValidationError(problem)
        return url


def _when(moment: datetime | None) -> str:
    return date_format(timezone.localtime(moment), "DATETIME_FORMAT") if moment is not None else "never"


@admin.register(TraceExporter)
class TraceExporterAdmin(AuditedAdmin, TeamScopedAdmin):
    form = TraceExporterForm
    change_form_template = "admin/traces/traceexporter/change_form.html"
    list_display = ("team", "enabled", "endpoint", "content", "service_name", "updated_at")
    list_select_related = ("team",)
    readonly_fields = ("header_names", "updated_at")
    fieldsets = [
        (None, {"fields": ["team", "enabled", "endpoint", "headers", "clear_headers"]}),
        ("What the spans carry", {"fields": ["content", "max_field_chars", "service_name"]}),
        ("Delivery", {"fields": ["delivery"]}),
    ]

    @admin.display(description="State")
    def delivery(self, obj: TraceExporter | None) -> str:
        """How the team's spans are getting to the receiver (``traces.export.delivery``)."""
        if obj is None or obj.pk is None:
            return "-"
        state = ExportState.objects.filter(team_id=obj.team_id).first()
        owed, oldest = backlog_of(obj.team_id)
        lines = [format_html("Last accepted: {}", _when(state.last_success_at if state else None)),
                 format_html("Owed: {} ended turn(s){}", owed,
                             format_html(", the oldest ended {}", _when(oldest)) if oldest else "")]
        if state is not None and state.last_error_at is not None:
            lines.append(format_html("Last error {}: {}", _when(state.last_error_at), state.last_error))
            if state.next_try_at is not None and state.failures:
                lines.append(format_html("Failing ({} in a row): tried again {}", state.failures,
                                         _when(state.next_try_at)))
        if state is not None and state.given_up:
            lines.append(format_html("Given up: {} turn(s), past the backlog's bound", state.given_up))
        return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in lines))

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).defer("headers_encrypted")

    def get_readonly_fields(self, request: HttpRequest, obj: TraceExporter | None = None) -> Any:
        return ("team", "delivery") if obj is not None else ()

    def get_fieldsets(self, request: HttpRequest, obj: TraceExporter | None = None) -> Any:
        return self.fieldsets if obj is not None else self.fieldsets[:-1]  # no delivery yet

    @method_decorator(sensitive_post_parameters("headers"))
    def changeform_view(self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
                        extra_context: dict | None = None) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: TraceExporter, form: TraceExporterForm,
                   change: bool) -> None:
        data = getattr(form, "cleaned_data", {})
        if data.get("clear_headers"):
            obj.set_headers([])
        elif data.get("headers"):
            obj.set_headers(data["headers"])
        obj.updated_by = request.user
        obj.save()
        export_config.forget(obj.team_id)
        pipeline.forget_configured()

    def render_change_form(self, request: HttpRequest, context: dict, add: bool = False,
                           change: bool = False, form_url: str = "",
                           obj: TraceExporter | None = None) -> Any:
        if obj is not None:
            context["test_span_url"] = reverse("admin:traces_traceexporter_test", args=[obj.pk])
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[Any]:
        wrap = self.admin_site.admin_view
        return [path("<path:object_id>/test/", wrap(require_POST(self.test_view)),
                     name="traces_traceexporter_test"),
                *super().get_urls()]

    def test_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        exporter = self.get_object(request, object_id)
        if exporter is None or not self.has_change_permission(request, exporter):
            raise Http404("Not found.")
        back = HttpResponseRedirect(reverse("admin:traces_traceexporter_change", args=[exporter.pk]))
        try:
            config = export_config.team_config(exporter)
        except SecretUnreadable as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return back
        if config is None:
            config = export_config.team_config(TraceExporter(
                team=exporter.team, endpoint=exporter.endpoint, enabled=True,
                headers_encrypted=exporter.headers_encrypted, content=exporter.content,
                max_field_chars=exporter.max_field_chars, service_name=exporter.service_name,
                updated_at=exporter.updated_at))
        result = probe.send_test_span(config, team_uuid=exporter.team.uuid.hex)
        where = config.endpoint
        if result.ok:
            self.message_user(request, f"Test span sent to {where}: the receiver answered "
                                       f"{result.answer} ({result.ms:.0f} ms).", messages.SUCCESS)
        else:
            self.message_user(request, f"The test span to {where} failed: {result.answer}",
                              messages.ERROR)
        return back
