"""The names of the built-in tools, filled in by ``registry.register``. A module of its own so
that rooms the registry imports (``mcp``) can keep clear of them without an import cycle."""

from __future__ import annotations

BUILTIN_NAMES: set[str] = set()
