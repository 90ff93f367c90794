from __future__ import annotations

import gc

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps

from . import signals

# Allocations of container objects between two collections of the youngest generation (Python's
# default: 700). A request or a turn allocates tens of thousands, nearly all freed by reference
# counting; at 700 the collector ran dozens of times per API request and took 5-6 % of the web
# process's CPU (perf; the collections and the objects they visit). With this and the freeze,
# an API request's web CPU went from 9.5 to 8.2 ms and its turn's from 13.1 to 12.1
# (``bench.gateway``, 10 at once). At most that many cyclic leftovers wait for a collection.
GC_YOUNG_THRESHOLD = 20_000


def gc_tune() -> None:
    """Move what the process has loaded so far (modules, settings, the URL conf, the apps) out
    of the collector's sight for good (``gc.freeze``), so the full collections no longer walk
    it, and collect the youngest generation every ``GC_YOUNG_THRESHOLD`` allocations."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


class AgentsiteConfig(AppConfig):
    verbose_name = "Teams and accounts"
    name = "agentsite"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        signals.connect()
        gc_tune()


class AgentsiteAdminConfig(admin_apps.AdminConfig):
    """The admin, opened to team admins and scoped to their teams (see ``admin_site``)."""

    default = False
    default_site = "agentsite.admin_site.AgentsiteAdminSite"
