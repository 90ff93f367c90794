from __future__ import annotations

from django.urls import path

from . import routing_views

urlpatterns = [
    path("simulator/", routing_views.routing_simulator, name="routing_simulator"),
    path("backtest/", routing_views.routing_backtest, name="routing_backtest"),
]
