"""The API's URLs: one django-ninja API mounted at the site's root, so that the
OpenAI-compatible routes sit at ``/v1/`` (where OpenAI clients expect them under a base URL of
``…/v1``) and the REST API at ``/api/v1/``; one schema at ``/api/v1/openapi.json`` covers both,
browsable at ``/api/v1/docs``."""

from __future__ import annotations

from django.urls import path

from agents.api.site import api

urlpatterns = [path("", api.urls)]
