from __future__ import annotations

from django.urls import path

from . import fork_views, views

urlpatterns = [
    path("<uuid:trace_uuid>/cancel/", views.trace_cancel, name="trace_cancel"),
    path("<uuid:trace_uuid>/approvals/<str:call_id>/", views.approval_decision, name="approval_decision"),
    path("<uuid:trace_uuid>/fork/<int:seq>/", fork_views.trace_fork, name="trace_fork"),
]
