"""Where the Phoenix tests find their server, and why they skip when there is none.

``make test-otel`` (``python -m tests.otel.phoenix run -- ...``) installs Phoenix once per
machine, starts it with an empty store and sets ``AGENTSITE_PHOENIX_URL``; pointed at a server
that is already running, the tests use that one. Without either they skip, saying why.
"""

from __future__ import annotations

import os

import pytest

from tests.otel.phoenix import PHOENIX, UNAVAILABLE_ENV, URL_ENV


def phoenix_skip_reason() -> str:
    unavailable = os.environ.get(UNAVAILABLE_ENV)
    if unavailable:
        return f"Phoenix could not be installed here: {unavailable}"
    return (f"Phoenix is not running: run `make test-otel` (it installs arize-phoenix {PHOENIX} "
            f"once per machine and starts it), or set {URL_ENV} to the base URL "
            "(http://host:port) of a running Phoenix server")


@pytest.fixture(scope="session")
def phoenix_url() -> str:
    """The base URL of a Phoenix server (``http://127.0.0.1:<port>``, no trailing slash);
    spans go to ``<url>/v1/traces``."""
    url = os.environ.get(URL_ENV, "").rstrip("/")
    if not url:
        pytest.skip(phoenix_skip_reason())
    return url
