from __future__ import annotations

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The composition point of the agents app: its rooms import only downwards, so the
        # chat's live fragments reach the turns here. Imported in ready() because Django loads
        # models after apps.py (the usual place to wire an app, as for signal receivers).
        from agents.chat.live import CHAT
        from agents.turns.announce import announcements_use

        announcements_use(CHAT)
