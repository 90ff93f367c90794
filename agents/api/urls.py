"""The API's URLs: one django-ninja API mounted at the site's root, so that the
OpenAI-compatible routes sit at ``/v1/`` (where OpenAI clients expect them under a base URL of
``…/v1``) and the REST API at ``/api/v1/``; one schema at ``/api/v1/openapi.json`` covers both,
browsable at ``/api/v1/docs``."""

from __future__ import annotations

from django.urls import URLPattern, include, path, re_path

from agents.api.errors import method_errors_shaped, not_found_view
from agents.api.site import api

# (Not ``app_name``: a URLconf module's ``app_name`` names the module's own include.)
_operations, _api_app, _api_namespace = api.urls
urlpatterns = [
    # Each of the API's paths, answering a method it does not take in the API's error shape.
    path("", include(([URLPattern(p.pattern, method_errors_shaped(p.callback), p.default_args, p.name)
                       for p in _operations], _api_app), namespace=_api_namespace)),
    re_path(r"^(?:api/)?v1/(?P<rest>.*)$", not_found_view, name="api_unknown"),
]
