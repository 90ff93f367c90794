"""Fakes at the network's edge for the tool tests: a resolver from a table, a public address."""

from __future__ import annotations

from tests.helpers import FakeResolver as BlockingResolver

PUBLIC_IP = "93.184.216.34"


class FakeResolver(BlockingResolver):
    """The fake DNS of ``tests.helpers``, answering as the tools' async resolver does."""

    async def __call__(self, host: str, port: int) -> list[str]:  # type: ignore[override]
        return super().__call__(host, port)
