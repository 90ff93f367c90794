from __future__ import annotations

from django.urls import path

from . import backtest, simulator

urlpatterns = [
    path("simulator/", simulator.routing_simulator, name="routing_simulator"),
    path("backtest/", backtest.routing_backtest, name="routing_backtest"),
]
