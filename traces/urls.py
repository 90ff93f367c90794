from __future__ import annotations

from django.urls import path

from .costs import cache_views
from .costs import views as cost_views
from .debug import compare_views
from .inspector import views

urlpatterns = [
    path("", views.trace_list, name="traces"),
    path("compare/", compare_views.trace_compare, name="trace_compare"),
    path("<uuid:trace_uuid>/", views.trace_detail, name="trace_detail"),
    path("<uuid:trace_uuid>/steps/", views.trace_steps_chunk, name="trace_steps_chunk"),
    path("<uuid:trace_uuid>/tree/", views.trace_tree, name="trace_tree"),
    path("<uuid:trace_uuid>/partial/", views.trace_partial, name="trace_partial"),
    path("<uuid:trace_uuid>/changes/", views.trace_changes, name="trace_changes"),
    path("<uuid:trace_uuid>/states/", views.trace_states_chunk, name="trace_states_chunk"),
    path("<uuid:trace_uuid>/steps/<int:seq>/", views.step_detail, name="step_detail"),
    path("<uuid:trace_uuid>/steps/<int:seq>/payloads/<str:kind>/", views.step_payload_download, name="step_payload_download"),
    path("<uuid:trace_uuid>/steps/<int:seq>/cache/", cache_views.step_cache, name="step_cache"),
    path("<uuid:trace_uuid>/feedback/", views.trace_feedback, name="trace_feedback"),
    path("<uuid:trace_uuid>/export.json", views.trace_export, name="trace_export"),
    path("<uuid:trace_uuid>/reprice/", cost_views.trace_reprice, name="trace_reprice"),
    path("<uuid:trace_uuid>/reprice/apply/", cost_views.trace_reprice_correct, name="trace_reprice_apply"),
]
