"""Loaded by pytest before Django's settings (``-p tests.pytest_env`` in pyproject): the test
suite runs on development settings (DEBUG on: a generated SECRET_KEY, localhost hosts, no HTTPS
redirect) unless the environment says otherwise. pytest-django still turns DEBUG off inside
each test."""

from __future__ import annotations

import os

os.environ.setdefault("DEBUG", "1")
