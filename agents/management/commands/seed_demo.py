from __future__ import annotations

from django.core.management.base import BaseCommand

from agents.config.seed import demo_seed


class Command(BaseCommand):
    help = "Create the demo team, its owner account and its agents (idempotent). DEMO_PASSWORD sets the password."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--password", help="Password for the demo owner (default: DEMO_PASSWORD or random).")

    def handle(self, *args, **options) -> None:
        result = demo_seed(password=options.get("password"))
        if result.created_user:
            self.stdout.write(self.style.SUCCESS(f"Created the demo team “{result.team.name}” and its owner."))
        else:
            self.stdout.write(f"The demo team “{result.team.name}” exists.")
        if result.password:
            self.stdout.write(f"Log in as: {result.username} / {result.password}")
        else:
            self.stdout.write(
                f"Log in as: {result.username} (password as set before; change it with "
                f"`manage.py changepassword {result.username}` or DEMO_PASSWORD)"
            )
