"""A Celery worker (or beat) of the chaos stack: the product's own, started as
``python -m tests.chaos.worker <celery arguments>``.

The stack's environment allows 127.0.0.1 (``OUTBOUND_ALLOWED_NETWORKS``), so that the model
provider and the ``lookup`` tool reach the fake model server on this machine.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    import django

    os.environ.setdefault("OUTBOUND_ALLOWED_NETWORKS", "127.0.0.1/32")
    django.setup()
    from celery.bin.celery import main as celery_main

    sys.argv = ["celery", *argv]
    return celery_main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
