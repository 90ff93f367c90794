from __future__ import annotations

from django.urls import path

from . import tool_views

urlpatterns = [
    path("<uuid:tool_uuid>/try/", tool_views.tool_try_view, name="tool_try"),
]
