"""The API keys page: everyone's own keys, and for admins and owners all of the team's.

A new key's secret is shown once (only its hash is kept): the form redirects to the page, which
takes the secret out of the session as it shows it, so a reload neither shows it again nor makes
a second key; that page is never cached. Making and revoking keys goes through ``agentsite.api_keys``, which
checks roles and scopes and writes the audit trail."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_POST

from . import selectors
from .access import get_for_team_or_404, team_required
from .api_keys import SCOPES_BY_ROLE, api_key_create, api_key_revoke
from .forms import ApiKeyForm
from .models import ApiKey, Membership

Role = Membership.Role
# The model name the snippets use when the team has no agent yet.
AGENT_PLACEHOLDER = "AGENT"


def _context(request: HttpRequest, form: ApiKeyForm | None = None, **extra: Any) -> dict[str, Any]:
    membership: Membership = request.membership
    allowed = {str(s) for s in SCOPES_BY_ROLE[Role(membership.role)]}
    form = form or ApiKeyForm(initial={"kind": ApiKey.Kind.PERSONAL,
                                       "scopes": [s for s in (ApiKey.Scope.CHAT, ApiKey.Scope.TRACES)
                                                  if s in allowed]})
    chosen = {str(v) for v in (form["scopes"].value() or [])}
    context = {
        "keys": selectors.api_keys_visible(membership),
        "sees_all": membership.can_configure,
        "form": form,
        # Only the scopes the person's role allows are offered.
        "scope_choices": [(value, label, value in chosen) for value, label in ApiKey.Scope.choices
                          if value in allowed],
        "read_only_role": ApiKey.Scope.CHAT not in allowed,
        "kinds": ApiKey.Kind.choices,
        "today": timezone.localdate(),
    }
    context.update(extra)
    return context


NEW_KEY_SESSION = "api_key_new"


@team_required()
@require_GET
def keys_page(request: HttpRequest) -> HttpResponse:
    new = request.session.pop(NEW_KEY_SESSION, None)
    key = (ApiKey.objects.filter(team=request.team, uuid=new["uuid"], user=request.user).first()
           if isinstance(new, dict) else None)
    if key is None:
        return render(request, "teams/api_keys.html", _context(request))
    agent = (request.team.agents.order_by("name").values_list("slug", flat=True).first()
             or AGENT_PLACEHOLDER)
    response = render(request, "teams/api_keys.html", _context(
        request, new_key=key, new_secret=new["secret"], api_base=request.build_absolute_uri("/v1"),
        docs_url=request.build_absolute_uri("/api/v1/docs"), snippet_agent=agent,
        agent_placeholder=agent == AGENT_PLACEHOLDER))
    # The secret is in this answer only: no cache may keep it.
    add_never_cache_headers(response)
    return response


@team_required()
@require_POST
def key_create(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            # A role too low for the kind or a scope is refused here with a 403.
            key, secret = api_key_create(
                membership=request.membership, name=data["name"], scopes=data["scopes"],
                kind=data["kind"], expires_at=form.expires_at, rpm_limit=data["rpm_limit"],
                tpm_limit=data["tpm_limit"], require_end_user=data["require_end_user"],
                end_user_rpm_limit=data["end_user_rpm_limit"], end_user_tpm_limit=data["end_user_tpm_limit"])
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            request.session[NEW_KEY_SESSION] = {"uuid": str(key.uuid), "secret": secret}
            return redirect("api_keys")
    return render(request, "teams/api_keys.html", _context(request, form), status=400)


@team_required()
@require_POST
def key_revoke(request: HttpRequest, key_uuid: Any) -> HttpResponse:
    # A key the person may not manage (someone else's, another team's) is not found.
    key = get_for_team_or_404(selectors.api_keys_visible(request.membership), request.team, uuid=key_uuid)
    if key.revoked_at is not None:
        messages.info(request, f"The key “{key.name}” was already revoked.")
    else:
        api_key_revoke(key=key, membership=request.membership)
        messages.success(request, f"The key “{key.name}” ({key.prefix}…) is revoked: requests "
                                  "with it are refused from now on.")
    return redirect("api_keys")
