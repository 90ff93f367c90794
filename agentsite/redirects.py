"""Where a form goes back to after a POST."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme


def redirect_back(request: HttpRequest, fallback: str, *args: Any, **kwargs: Any) -> HttpResponse:
    """Back to the form's ``next`` when it is a page of this site, else to ``fallback`` (a URL
    name with its arguments, or a path)."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()},
                                                  require_https=request.is_secure()):
        return redirect(target)
    return redirect(fallback, *args, **kwargs)
