from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TracesConfig(AppConfig):
    name = "traces"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Reference data, like Django's content types: a database without the global price
        # table (fresh, or flushed between tests) gets the shipped one after migrating.
        from .costs.price_seed import price_seed_if_empty

        post_migrate.connect(price_seed_if_empty, sender=self, dispatch_uid="traces_price_seed")
