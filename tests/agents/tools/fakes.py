"""Fakes at the network's edge for the tool tests: a resolver from a table, a public address."""

from __future__ import annotations

PUBLIC_IP = "93.184.216.34"


class FakeResolver:
    """Names to addresses, recording every lookup."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(f"no such host: {host}")
        return list(self.table[host])
