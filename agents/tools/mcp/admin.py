"""MCP servers in the admin, scoped to the user's teams and audited like the Tool admin.

The form takes the transport, the URL (checked against the outbound-network policy on save)
and write-only headers for Streamable HTTP, or one of the operator's stdio servers by key.
The change page has "Test" (what the server offers, with schemas, nothing saved), "Refresh
tools" and "Disable", and lists the server's Tool rows with their schemas. Everything a server
says (names, descriptions, instructions, schemas) is shown escaped.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.utils.formats import date_format
from django.utils.html import format_html
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from agents.models import McpServer
from agents.runtime.tools import ToolError
from agentsite.admin_site import TeamScopedAdmin
from agentsite.audit import AuditedAdmin
from agentsite.headers import header_lines_clean, headers_field
from agentsite.outbound import base_url_problem

from .credentials import PREREGISTERED, client_record, preregistered_client
from .endpoints import operator_key_problem, stdio_servers
from .services import (
    mcp_server_disable,
    mcp_server_discover,
    mcp_server_refresh,
    mcp_server_save,
)

HEADERS_HELP = ("One header per line, as “Name: value”, e.g. “Authorization: Bearer …”. Values "
                "are stored encrypted, sent only to this server and never shown again.")


class McpServerForm(forms.ModelForm):
    headers = headers_field(HEADERS_HELP)
    clear_headers = forms.BooleanField(required=False, label="Remove the stored headers")
    oauth_client_id = forms.CharField(
        required=False, max_length=500, label="Pre-registered client ID",
        help_text="Only for an authorization server that does not register clients itself: the "
                  "client ID you registered there, with the sign-in callback below as its "
                  "redirect URI. Empty: this site registers itself at the first sign-in.")
    oauth_client_secret = forms.CharField(
        required=False, max_length=500, label="Pre-registered client secret",
        widget=forms.PasswordInput(render_value=False),
        help_text="Stored encrypted, never shown again; empty for a public client.")
    forget_oauth_client = forms.BooleanField(
        required=False, label="Forget the client registration",
        help_text="The next sign-in registers again (or uses the client ID above).")
    operator_key = forms.ChoiceField(required=False, label="Operator's stdio server",
                                     help_text="stdio only: one of the servers the site "
                                               "operator set up (MCP_STDIO_SERVERS).")

    class Meta:
        model = McpServer
        fields = ["team", "name", "transport", "url", "operator_key", "enabled",
                  "default_policy", "timeout_s", "max_result_bytes", "ttl_s", "use_instructions",
                  "sign_in", "oauth_scope"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        keys = sorted(stdio_servers())
        if "operator_key" in self.fields:
            self.fields["operator_key"].choices = [("", "—"), *((k, k) for k in keys)]
        if not keys and "transport" in self.fields:
            self.fields["transport"].choices = [
                c for c in self.fields["transport"].choices if c[0] != McpServer.Transport.STDIO]
        if "headers" in self.fields:
            self.fields["headers"].initial = ""
        if "headers" in self.fields and self.instance.pk and self.instance.headers_encrypted:
            try:
                names = ", ".join(self.instance.headers())
                stored = f"Stored: {names}. Leave empty to keep them; anything entered replaces all."
            except Exception:  # noqa: BLE001 - an unreadable secret is reported, not raised
                stored = "The stored headers cannot be decrypted: enter them again."
            self.fields["headers"].help_text = f"{self.fields['headers'].help_text} {stored}"

    def clean_headers(self) -> list[tuple[str, str]]:
        return header_lines_clean(self.cleaned_data.get("headers"))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        transport = data.get("transport")
        if transport == McpServer.Transport.STDIO:
            problem = operator_key_problem(data.get("operator_key") or "")
            if problem:
                self.add_error("operator_key", problem)
        elif transport == McpServer.Transport.HTTP:
            url = (data.get("url") or "").strip()
            data["url"] = url
            if not url:
                self.add_error("url", "Enter the server's Streamable-HTTP URL.")
            else:
                problem = base_url_problem(url)
                if problem:
                    self.add_error("url", problem)
        if data.get("sign_in") and transport == McpServer.Transport.STDIO:
            self.add_error("sign_in", "Only servers reached over HTTP sign in.")
        if data.get("sign_in") and any(name.lower() == "authorization" for name, _ in data.get("headers") or ()):
            self.add_error("headers", "The sign-in supplies the Authorization header: leave it out.")
        if data.get("oauth_client_secret") and not data.get("oauth_client_id"):
            self.add_error("oauth_client_id", "Enter the client ID the secret belongs to.")
        return data


def sign_in_summary(server: McpServer) -> str:
    """The sign-in's state on the server's admin page, with the link to make it."""
    if server.pk is None or not server.sign_in:
        return "None: choose one above for a server that needs sign-in, and save."
    link = (f'{reverse("mcp_sign_in", args=[server.uuid])}?'
            f'{urlencode({"next": reverse("admin:agents_mcpserver_change", args=[server.pk])})}')
    if server.sign_in == McpServer.SignIn.TEAM:
        row = server.sign_ins.filter(user=None).select_related("signed_in_by").first()
        if row is not None and row.signed_in:
            who = row.signed_in_by.get_username() if row.signed_in_by else "someone"
            state = format_html("Signed in by {} on {}.", who, date_format(row.signed_in_at, "DATETIME_FORMAT")
                                if row.signed_in_at else "?")
        else:
            state = format_html("Not signed in{}.", f": {row.last_error}" if row and row.last_error else "")
        action = "Sign in again or sign out" if row is not None and row.signed_in else "Sign in"
    else:
        people = server.sign_ins.exclude(tokens_encrypted="").count()
        state = format_html("{} {} signed in with their own account.", people,
                            "person has" if people == 1 else "people have")
        action = "Sign in yourself"
    info = client_record(server)
    client = ("not registered yet (it registers at the first sign-in)" if info is None else
              f"pre-registered, client ID “{info['client_id']}”" if info.get("software_id") == PREREGISTERED
              else f"registered by this site, client ID “{info['client_id']}”")
    return format_html('{} <a href="{}">{}</a>.<br>Client: {}. Sign-in callback (the redirect '
                       "URI): <code>{}</code> on this site's address.", state, link, action, client,
                       reverse("mcp_sign_in_callback"))


def _pretty(schema: Any) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True)


@admin.register(McpServer)
class McpServerAdmin(AuditedAdmin, TeamScopedAdmin):
    form = McpServerForm
    change_form_template = "admin/agents/mcpserver/change_form.html"
    list_display = ("name", "team", "transport", "enabled", "default_policy", "protocol_version",
                    "last_refreshed_at", "has_error")
    list_filter = ("transport", "enabled")
    list_select_related = ("team",)
    search_fields = ("name", "url")
    readonly_fields = ("protocol_version", "server_info", "instructions", "last_refreshed_at",
                       "last_error", "sign_in_state")
    actions = ["refresh_servers", "disable_servers"]
    fieldsets = [
        (None, {"fields": ["team", "name", "transport", "enabled", "default_policy"]}),
        ("Streamable HTTP", {"fields": ["url", "headers", "clear_headers"]}),
        ("Sign-in (OAuth)", {"fields": ["sign_in", "oauth_scope", "sign_in_state", "oauth_client_id",
                                        "oauth_client_secret", "forget_oauth_client"]}),
        ("stdio (operator-defined)", {"fields": ["operator_key"]}),
        ("Limits", {"fields": ["timeout_s", "max_result_bytes", "ttl_s"]}),
        ("Last discovery", {"fields": ["protocol_version", "server_info", "instructions",
                                       "use_instructions", "last_refreshed_at", "last_error"]}),
    ]

    def get_queryset(self, request: HttpRequest) -> models.QuerySet:
        return super().get_queryset(request).defer("headers_encrypted")

    @admin.display(boolean=True, description="Error")
    def has_error(self, obj: McpServer) -> bool:
        return bool(obj.last_error)

    def get_fieldsets(self, request: HttpRequest, obj: McpServer | None = None) -> list[Any]:
        sets = list(self.fieldsets)
        if obj is not None:
            drop = (("stdio (operator-defined)",) if obj.transport == McpServer.Transport.HTTP
                    else ("Streamable HTTP", "Sign-in (OAuth)"))
            sets = [s for s in sets if s[0] not in drop]
        elif not stdio_servers():
            sets = [s for s in sets if s[0] != "stdio (operator-defined)"]
        if obj is None:
            sets = [s for s in sets if s[0] != "Last discovery"]
        return sets

    def get_readonly_fields(self, request: HttpRequest, obj: McpServer | None = None) -> Any:
        return (*self.readonly_fields, "team", "transport") if obj is not None else self.readonly_fields

    @admin.display(description="State")
    def sign_in_state(self, obj: McpServer) -> str:
        return sign_in_summary(obj)

    @method_decorator(sensitive_post_parameters("headers", "oauth_client_secret"))
    def changeform_view(self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
                        extra_context: dict | None = None) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: McpServer, form: McpServerForm, change: bool) -> None:
        data = getattr(form, "cleaned_data", {})
        client = None
        if data.get("oauth_client_id"):
            client = preregistered_client(data["oauth_client_id"], data.get("oauth_client_secret") or "",
                                          request.build_absolute_uri(reverse("mcp_sign_in_callback")))
        mcp_server_save(server=obj, headers=data.get("headers") or None,
                        clear_headers=bool(data.get("clear_headers")), oauth_client=client,
                        forget_oauth_client=bool(data.get("forget_oauth_client")))

    def render_change_form(self, request: HttpRequest, context: dict, add: bool = False,
                           change: bool = False, form_url: str = "", obj: McpServer | None = None) -> Any:
        if obj is not None:
            tools = obj.tools.order_by("name")
            context["mcp_tools"] = [
                {"row": t, "url": reverse("admin:agents_tool_change", args=[t.pk]),
                 "schema": _pretty(t.parameters)} for t in tools]
            context["mcp_action_urls"] = {
                name: reverse(f"admin:agents_mcpserver_{name}", args=[obj.pk])
                for name in ("test", "refresh", "disable")}
        return super().render_change_form(request, context, add, change, form_url, obj)

    # -- object tools -----------------------------------------------------------------------------
    def get_urls(self) -> list[Any]:
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/test/", wrap(require_POST(self.test_view)),
                 name="agents_mcpserver_test"),
            path("<path:object_id>/refresh/", wrap(require_POST(self.refresh_view)),
                 name="agents_mcpserver_refresh"),
            path("<path:object_id>/disable/", wrap(require_POST(self.disable_view)),
                 name="agents_mcpserver_disable"),
            *super().get_urls(),
        ]

    def _server(self, request: HttpRequest, object_id: str) -> McpServer:
        obj = self.get_object(request, object_id)
        if obj is None or not self.has_change_permission(request, obj):
            raise Http404("Not found.")
        return obj

    def _change_url(self, obj: McpServer) -> str:
        return reverse("admin:agents_mcpserver_change", args=[obj.pk])

    def test_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        server = self._server(request, object_id)
        discovery, error = None, ""
        try:
            discovery = mcp_server_discover(server, user_id=request.user.pk)
        except ToolError as exc:
            error = str(exc)
        tools = [{"tool": t, "schema": _pretty(t.input_schema),
                  "annotations": _pretty(t.annotations) if t.annotations else ""}
                 for t in (discovery.tools if discovery else [])]
        context = {**self.admin_site.each_context(request), "title": f"Test {server.name}",
                   "opts": self.opts, "server": server, "discovery": discovery, "error": error,
                   "tools": tools, "server_info": _pretty(discovery.server_info) if discovery else "",
                   "change_url": self._change_url(server)}
        return TemplateResponse(request, "admin/agents/mcpserver/test.html", context)

    def refresh_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        server = self._server(request, object_id)
        self._report(request, server, mcp_server_refresh(server, actor=request.user))
        return HttpResponseRedirect(self._change_url(server))

    def disable_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        server = self._server(request, object_id)
        mcp_server_disable(server, actor=request.user)
        self.message_user(request, f"MCP server “{server.name}” is disabled; its tools are left "
                                   "out of turns.", messages.SUCCESS)
        return HttpResponseRedirect(self._change_url(server))

    def _report(self, request: HttpRequest, server: McpServer, result: Any) -> None:
        if not result.ok:
            self.message_user(request, f"Refresh failed; the tools were kept. {result.error}",
                              messages.ERROR)
            return
        self.message_user(request, f"“{server.name}”: {len(result.created)} new, "
                                   f"{len(result.updated)} changed, {len(result.deleted)} removed "
                                   "tool(s).", messages.SUCCESS)
        for warning in result.warnings:
            self.message_user(request, f"“{server.name}”: {warning}", messages.WARNING)

    # -- actions ----------------------------------------------------------------------------------
    @admin.action(description="Refresh the tools of the selected servers", permissions=["change"])
    def refresh_servers(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        for server in queryset:
            self._report(request, server, mcp_server_refresh(server, actor=request.user))

    @admin.action(description="Disable the selected servers", permissions=["change"])
    def disable_servers(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        for server in queryset:
            mcp_server_disable(server, actor=request.user)
        self.message_user(request, f"{queryset.count()} server(s) disabled.", messages.SUCCESS)
