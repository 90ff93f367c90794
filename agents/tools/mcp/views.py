"""Signing in to an MCP server that needs it, in the browser (``sign_in``).

``/admin/tools/mcp/<uuid>/sign-in/``: a page that says whose sign-in it is (the team's: team
admins only; per-person: any member of the server's team, for themselves) and whether it is
made, with "Sign in" (POST: a page that moves the browser on to the authorization server) and
"Sign out".
``/admin/tools/mcp/callback/``: where the authorization server sends the browser back; the
sign-in ends there, the server's tools are fetched again with the new token, and the browser
goes back where the sign-in started (``next``, a path of this site).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.models import McpServer, McpSignIn
from agentsite.access import get_for_user_or_404, request_membership, require_role
from agentsite.models import Membership

from . import sdk_sign_in
from .credentials import SignInFailed
from .endpoints import endpoint_for
from .services import mcp_server_refresh

NEXT_KEY = "mcp_sign_in_next"  # session: the state of each sign-in under way -> where to go back
NEXT_KEPT = 10  # the newest sign-ins under way a session remembers


def _server(request: HttpRequest, server_uuid) -> McpServer:
    """The server, if the person may make its sign-in: a team admin for the team's, any member
    for their own; 404 outside the team or for a server without sign-in."""
    servers = McpServer.objects.select_related("team").exclude(sign_in=McpServer.SignIn.NONE)
    if request.user.is_superuser:
        server = get_object_or_404(servers, uuid=server_uuid)
    else:
        server = get_for_user_or_404(servers, request.user, uuid=server_uuid)
        if server.sign_in == McpServer.SignIn.TEAM:
            require_role(request_membership(request, server.team_id), Membership.Role.ADMIN,
                         "sign in for the team")
    if server.transport != McpServer.Transport.HTTP:
        raise Http404("Only servers reached over HTTP sign in.")
    return server


def _next(request: HttpRequest, server: McpServer) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    if server.sign_in == McpServer.SignIn.TEAM:
        return reverse("admin:agents_mcpserver_change", args=[server.pk])
    return reverse("home")


def _row(server: McpServer, user) -> McpSignIn | None:
    user_id = user.pk if server.sign_in == McpServer.SignIn.PERSON else None
    return McpSignIn.objects.filter(server=server, user_id=user_id).first()


@login_required
@require_http_methods(["GET", "POST"])
def mcp_sign_in_view(request: HttpRequest, server_uuid) -> HttpResponse:
    server = _server(request, server_uuid)
    back = _next(request, server)
    if request.method == "POST":
        endpoint = endpoint_for(server, user_id=request.user.pk)
        callback = request.build_absolute_uri(reverse("mcp_sign_in_callback"))
        try:
            url = sdk_sign_in().sign_in_start(server=server, endpoint=endpoint, user=request.user,
                                              redirect_uri=callback)
        except SignInFailed as exc:
            messages.error(request, f"Signing in to “{server.name}” did not work: {exc}")
        else:
            target = urlparse(url)
            if target.scheme in ("http", "https") and target.netloc:
                state = (parse_qs(target.query).get("state") or [""])[0]
                under_way = list(request.session.get(NEXT_KEY, {}).items())[-(NEXT_KEPT - 1):]
                request.session[NEXT_KEY] = {**dict(under_way), state: back}
                # A page that moves on, not a redirect: the site's CSP (form-action 'self')
                # would stop a form's redirect to another origin.
                return render(request, "mcp/sign_in_redirect.html",
                              {"server": server, "url": url, "host": target.netloc})
            messages.error(request, f"Signing in to “{server.name}” did not work: its "
                                    "authorization server gave a sign-in address that is not a web page.")
    return render(request, "mcp/sign_in.html", {
        "server": server, "row": _row(server, request.user), "next": back,
        "personal": server.sign_in == McpServer.SignIn.PERSON,
    })


@login_required
@require_POST
def mcp_sign_out_view(request: HttpRequest, server_uuid) -> HttpResponse:
    server = _server(request, server_uuid)
    row = _row(server, request.user)
    if row is not None and row.signed_in:
        revoked = sdk_sign_in().sign_out(row, endpoint_for(server, user_id=request.user.pk))
        messages.success(request, f"Signed out of “{server.name}”" + (
            "; the server revoked the tokens." if revoked else
            "; the tokens are forgotten here (the server offers no revocation, or refused it)."))
    return HttpResponseRedirect(_next(request, server))


@login_required
@require_GET
def mcp_sign_in_callback_view(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    back_to = request.session.get(NEXT_KEY, {})
    target = back_to.pop(state, None)
    request.session[NEXT_KEY] = back_to
    try:
        row = sdk_sign_in().sign_in_finish(
            state=state, user=request.user, code=request.GET.get("code", ""), iss=request.GET.get("iss"),
            error=request.GET.get("error_description") or request.GET.get("error", ""))
    except SignInFailed as exc:
        messages.error(request, f"Signing in did not work: {exc}")
        return HttpResponseRedirect(target or reverse("home"))
    server = row.server
    refresh = mcp_server_refresh(server, actor=request.user)
    found = "" if not refresh.ok else (
        f"; its tools were fetched again ({server.tools.count()} in all).")
    messages.success(request, f"Signed in to “{server.name}”{found or '.'}")
    if not refresh.ok:
        messages.warning(request, f"Its tools could not be fetched: {refresh.error}")
    return HttpResponseRedirect(target or _next(request, server))
