from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("<uuid:tool_uuid>/try/", views.tool_try_view, name="tool_try"),
]
