from __future__ import annotations

from django.urls import path

from . import views
from .mcp import views as mcp_views

urlpatterns = [
    path("<uuid:tool_uuid>/try/", views.tool_try_view, name="tool_try"),
    path("mcp/<uuid:server_uuid>/sign-in/", mcp_views.mcp_sign_in_view, name="mcp_sign_in"),
    path("mcp/<uuid:server_uuid>/sign-out/", mcp_views.mcp_sign_out_view, name="mcp_sign_out"),
    path("mcp/callback/", mcp_views.mcp_sign_in_callback_view, name="mcp_sign_in_callback"),
]
