from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps

from . import signals


class AgentsiteConfig(AppConfig):
    verbose_name = "Teams and accounts"
    name = "agentsite"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        signals.connect()


class AgentsiteAdminConfig(admin_apps.AdminConfig):
    """The admin, opened to team admins and scoped to their teams (see ``admin_site``)."""

    default = False
    default_site = "agentsite.admin_site.AgentsiteAdminSite"
