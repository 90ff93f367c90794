"""The admin page "Import from the community catalogue" (on prices): upload the catalogue or
name its URL, see the plan, confirm to apply it. Site admins only: it writes the global table.

The preview keeps the catalogue as read (compact form) and the plan's digest in the session;
confirming plans again from it and applies only if the plan is still the one shown (else the new
plan is shown to be checked again)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agentsite.outbound.document import DOCUMENT_MAX_BYTES

from . import catalogue_fetch
from .plan import Plan, catalogue_apply, catalogue_plan
from .read import Catalogue, CatalogueError, Skip, catalogue_read

SESSION_KEY = "traces_catalogue_preview"
EXAMPLE_URL = ("https://raw.githubusercontent.com/BerriAI/litellm/main/"
               "model_prices_and_context_window.json")


class CatalogueImportForm(forms.Form):
    file = forms.FileField(required=False, label="File",
                           help_text="model_prices_and_context_window.json")
    url = forms.URLField(required=False, assume_scheme="https", label="Or its URL",
                         help_text=f"For example {EXAMPLE_URL}")
    version = forms.CharField(required=False, max_length=50, label="Catalogue version",
                              help_text="Kept with every row, when you know it (a release or commit).")
    effective_from = forms.DateTimeField(required=False, label="Changed prices apply from",
                                         help_text="Empty: now.")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        upload, url = data.get("file"), data.get("url")
        if bool(upload) == bool(url):
            raise forms.ValidationError("Choose a file or give a URL (one of them).")
        if upload is not None and upload.size > DOCUMENT_MAX_BYTES:
            self.add_error("file", f"The file is larger than {DOCUMENT_MAX_BYTES // (1024 * 1024)} MB.")
        return data

    def catalogue(self) -> Catalogue:
        data = self.cleaned_data
        if data.get("url"):
            return catalogue_fetch(data["url"], version=data.get("version") or "")
        upload = data["file"]
        return catalogue_read(upload.read(), source=upload.name[:200], version=data.get("version") or "",
                              read_at=timezone.now())


def _keep(request: HttpRequest, plan: Plan) -> None:
    catalogue = plan.catalogue
    request.session[SESSION_KEY] = {
        "catalogue": catalogue.to_compact(),
        "skipped": [[s.key, s.reason] for s in catalogue.skipped],
        "other_providers": catalogue.other_providers,
        "effective_from": plan.effective_from.isoformat(), "digest": plan.digest()}


def _restore(request: HttpRequest) -> tuple[Plan, str] | None:
    kept = request.session.get(SESSION_KEY)
    if not isinstance(kept, dict):
        return None
    try:
        catalogue = catalogue_read(kept["catalogue"])
        effective: datetime | None = parse_datetime(kept["effective_from"])
    except (CatalogueError, KeyError, TypeError):
        return None
    catalogue.skipped = [Skip(str(k), str(r)) for k, r in kept.get("skipped") or []]
    catalogue.other_providers = int(kept.get("other_providers") or 0)
    return catalogue_plan(catalogue, effective_from=effective), str(kept.get("digest") or "")


def catalogue_import_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    if not request.user.is_superuser:
        raise PermissionDenied  # the global table is the site admins'
    form = CatalogueImportForm()
    plan: Plan | None = None
    errors: list[str] = []
    notice = ""
    if request.method == "POST" and request.POST.get("step") == "apply":
        restored = _restore(request)
        if restored is None:
            errors.append("The preview has expired: choose the catalogue again.")
        else:
            plan, digest = restored
            if plan.digest() != digest or request.POST.get("digest") != digest:
                notice = "The price table changed since the preview: check the new plan below."
                _keep(request, plan)
            else:
                report = catalogue_apply(plan, actor=request.user)
                for row in report.created:
                    model_admin.log_addition(request, row, "Imported from the community catalogue")
                del request.session[SESSION_KEY]
                model_admin.message_user(request, report.summary(), messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:traces_modelprice_changelist"))
    elif request.method == "POST":
        form = CatalogueImportForm(request.POST, request.FILES)
        if form.is_valid():
            try:
                catalogue = form.catalogue()
            except CatalogueError as exc:
                errors.append(str(exc))
            else:
                plan = catalogue_plan(catalogue, effective_from=form.cleaned_data.get("effective_from"))
                _keep(request, plan)
    context = {**model_admin.admin_site.each_context(request), "opts": model_admin.opts,
               "title": "Import from the community catalogue", "form": form, "plan": plan,
               "errors": errors, "notice": notice,
               "digest": request.session.get(SESSION_KEY, {}).get("digest", "") if plan else "",
               "limits_changed": [i for i in plan.unchanged if i.limits_changed] if plan else []}
    return TemplateResponse(request, "admin/traces/modelprice/catalogue.html", context)
