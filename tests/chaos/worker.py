"""A Celery worker (or beat) of the chaos stack: the product's own, started as
``python -m tests.chaos.worker <celery arguments>``.

One difference from ``celery -A agentsite ...``: the fetcher of HTTP tools trusts 127.0.0.1,
so the ``lookup`` tool can reach the fake model server's counting endpoint. The platform has
no setting for the operator allowlist ``agents.tools.net.Fetcher.allowed_networks`` holds, so
this sets it in the process, as a test replaces ``net.default_fetcher``.
"""

from __future__ import annotations

import ipaddress
import sys


def main(argv: list[str]) -> int:
    import django

    django.setup()
    from agents.tools import net

    net.default_fetcher().allowed_networks = (ipaddress.ip_network("127.0.0.1/32"),)
    from celery.bin.celery import main as celery_main

    sys.argv = ["celery", *argv]
    return celery_main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
