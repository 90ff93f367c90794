from __future__ import annotations

from django.urls import path

from . import cost_views

urlpatterns = [
    path("", cost_views.costs, name="costs"),
    path("reprice/", cost_views.range_reprice, name="cost_reprice"),
    path("reprice/apply/", cost_views.range_reprice_correct, name="cost_reprice_apply"),
]
