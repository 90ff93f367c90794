#!/usr/bin/env python3
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    if sys.argv[1:2] == ["dev"]:
        # The development runner, and the server and worker it starts, run in DEBUG unless the
        # environment says otherwise; everything else (production) defaults to DEBUG off.
        os.environ.setdefault("DEBUG", "1")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
