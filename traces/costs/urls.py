from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.costs, name="costs"),
    path("reprice/", views.range_reprice, name="cost_reprice"),
    path("reprice/apply/", views.range_reprice_correct, name="cost_reprice_apply"),
]
