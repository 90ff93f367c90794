"""The API's URLs: one django-ninja API mounted at the site's root, so that the
OpenAI-compatible routes sit at ``/v1/`` (where OpenAI clients expect them under a base URL of
``…/v1``) and the REST API at ``/api/v1/``; one schema at ``/api/v1/openapi.json`` covers both,
browsable at ``/api/v1/docs``."""

from __future__ import annotations

from django.urls import path, re_path

from agents.api.errors import not_found_view
from agents.api.site import api

urlpatterns = [
    path("", api.urls),
    re_path(r"^(?:api/)?v1/(?P<rest>.*)$", not_found_view, name="api_unknown"),
]
