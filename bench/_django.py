"""Run a benchmark against a scratch database: a throwaway SQLite file unless DATABASE_URL is set
(then that database is used as it is — point it at a scratch database)."""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import tempfile

SCRATCH: list[str] = []


def cleanup() -> None:
    """Remove the scratch directories (at exit; call it before ``os._exit``)."""
    while SCRATCH:
        shutil.rmtree(SCRATCH.pop(), ignore_errors=True)


def setup_django(*, migrate: bool = True) -> str:
    """Configure Django on a scratch var/ directory; returns that directory. Prints the
    machine's load first: every benchmark prints it at its start."""
    from bench._measure import print_machine

    print_machine()
    scratch = tempfile.mkdtemp(prefix="agentsite-bench-")
    SCRATCH.append(scratch)
    atexit.register(cleanup)
    os.environ.setdefault("AGENTSITE_VAR_DIR", scratch)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    os.environ.setdefault("CHANNEL_LAYER_IN_MEMORY", "1")
    # ``make bench`` runs in a plain shell: development settings (plain HTTP for the test
    # client's requests), with a throwaway key for the scratch data. Benchmarks that measure
    # production settings set DEBUG=false before this.
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
    return os.environ["AGENTSITE_VAR_DIR"]

