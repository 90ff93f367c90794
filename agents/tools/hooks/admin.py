"""Hooks in the admin, scoped to the user's teams and audited (like tools).

The signing secret is write-only: never rendered, an empty field keeps the stored one, and
"Generate a new secret" makes one that is shown once in a message. A command hook names one of
the operator's commands (``settings.HOOK_COMMANDS``); nobody types a command here. The URL is
checked by the outbound-network policy on save. "Send a test event" on the change page runs the
saved hook once with a sample event and reports its decision."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from agents.models import Agent, Hook
from agents.runtime.scrub import scrubbed_line
from agentsite.admin_site import TeamScopedAdmin, admin_team_ids
from agentsite.audit import AuditedAdmin, snapshot

from .build import operator_commands
from .services import hook_save, hook_test_event
from .webhook import webhook_url_problem

SIGNING_HELP = ("Signs every request: X-Agentsite-Signature is sha256=HMAC-SHA256(secret, "
               "“timestamp.body”: the X-Agentsite-Timestamp value, a dot, the request body). Stored encrypted and never shown again.")


class WriteOnlyInput(forms.PasswordInput):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(render_value=False, attrs={"autocomplete": "new-password"}, **kwargs)


class HookAdminForm(forms.ModelForm):
    secret = forms.CharField(required=False, strip=True, widget=WriteOnlyInput(), label="Secret",
                             help_text=SIGNING_HELP)
    generate_secret = forms.BooleanField(required=False, label="Generate a new secret")
    operator_key = forms.ChoiceField(required=False, label="Operator command")

    class Meta:
        model = Hook
        fields = ["team", "name", "event", "kind", "url", "operator_key", "matcher", "agents",
                  "position", "enabled", "timeout_s"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        keys = sorted(operator_commands())
        current = self.instance.operator_key if self.instance.pk else ""
        choices = [("", "—")] + [(k, k) for k in keys]
        if current and current not in keys:
            choices.append((current, f"{current} (no longer set up by the operator)"))
        self.fields["operator_key"].choices = choices
        self.fields["operator_key"].help_text = (
            "Command hooks: one of the commands the site operator set up (HOOK_COMMANDS)."
            if keys else "The site operator has set up no commands (HOOK_COMMANDS).")
        if self.instance.pk and self.instance.secret_encrypted:
            self.fields["secret"].help_text = f"{SIGNING_HELP} A secret is stored; leave empty to keep it."

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        kind, team = data.get("kind"), data.get("team")
        if kind == Hook.Kind.WEBHOOK:
            problem = webhook_url_problem(data.get("url") or "")
            if problem:
                self.add_error("url", problem)
            data["operator_key"] = ""
        elif kind == Hook.Kind.COMMAND:
            key = data.get("operator_key") or ""
            if key not in operator_commands():
                self.add_error("operator_key", "Choose one of the operator's commands.")
            data["url"] = ""
        agents = data.get("agents")
        if team is not None and agents is not None:
            others = [a.name for a in agents if a.team_id != team.pk]
            if others:
                self.add_error("agents", f"Not agents of {team}: {', '.join(others)}.")
        return data


@admin.register(Hook)
class HookAdmin(AuditedAdmin, TeamScopedAdmin):
    form = HookAdminForm
    change_form_template = "admin/agents/hook/change_form.html"
    list_display = ("name", "team", "event", "kind", "enabled", "position", "matcher", "updated_at")
    list_editable = ("enabled", "position")
    list_filter = ("event", "kind", "enabled")
    list_select_related = ("team",)
    search_fields = ("name", "url", "matcher", "operator_key")
    filter_horizontal = ("agents",)
    fieldsets = [
        (None, {"fields": ["team", "name", "event", "kind", "enabled", "position", "timeout_s"]}),
        ("Webhook", {"fields": ["url", "secret", "generate_secret"],
                     "description": "An HTTPS POST of the event's JSON, signed with the secret; "
                                    "it answers {\"decision\": \"allow\" | \"deny\" | \"warn\", "
                                    "\"message\": \"…\"} (message hooks may add \"content\", "
                                    "the rewritten text)."}),
        ("Command", {"fields": ["operator_key"]}),
        ("Which calls and agents", {"fields": ["matcher", "agents"]}),
    ]

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).defer("secret_encrypted")

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "agents" and not request.user.is_superuser:
            kwargs["queryset"] = Agent.objects.filter(team_id__in=admin_team_ids(request)).order_by("name")
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    @method_decorator(sensitive_post_parameters("secret"))
    def changeform_view(self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
                        extra_context: dict | None = None) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Hook, form: HookAdminForm, change: bool) -> None:
        if change and not hasattr(request, "_audit_before"):
            request._audit_before = snapshot(Hook.objects.get(pk=obj.pk))  # list edits
        data = getattr(form, "cleaned_data", {})
        generated = hook_save(hook=obj, secret=data.get("secret") or None,
                              generate=bool(data.get("generate_secret")))
        if generated:
            self.message_user(request, f"The new signing secret of “{obj.name}” is {generated} — "
                                       "copy it now, it is not shown again.", messages.WARNING)

    def log_change(self, request: HttpRequest, obj: Hook, message: Any) -> Any:
        result = super().log_change(request, obj, message)
        request.__dict__.pop("_audit_before", None)
        return result

    # -- the test event -------------------------------------------------------------------------------
    def get_urls(self) -> list:
        info = self.opts.app_label, self.opts.model_name
        return [path("<path:object_id>/test-event/",
                     self.admin_site.admin_view(require_POST(self.test_event_view)),
                     name="{}_{}_test_event".format(*info)),
                *super().get_urls()]

    def test_event_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        hook = self.get_object(request, unquote(object_id))
        if hook is None:
            raise Http404("No such hook.")
        if not self.has_change_permission(request, hook):
            raise PermissionDenied
        hook = Hook.objects.get(pk=hook.pk)  # with its secret
        run = hook_test_event(hook=hook)
        # What the hook said is the receiver's: scrubbed whole, then cut.
        said = scrubbed_line(" ".join(run.messages), 500, [hook.secret()]) or "no message"
        detail = scrubbed_line(run.detail, 200) if run.detail else ""
        text = (f"Test event {run.event}: {run.decision} — {said} ({run.duration_ms:.0f} ms"
                + (f", {detail}" if detail else "") + ")")
        level = {"allow": messages.SUCCESS, "warn": messages.WARNING}.get(run.decision, messages.ERROR)
        self.message_user(request, text, level)
        return redirect(reverse("admin:agents_hook_change", args=[hook.pk]))
