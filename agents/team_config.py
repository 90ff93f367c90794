"""What a team has configured, as turns read it: kept per process, read again when it changed.

A turn reads the same configuration rows over and over (its agent's routing rules and model
routes, tools, hooks, MCP servers, budgets, fallback providers and model settings): ten queries
per turn for rows that change a few times a day. Inside ``team_config_read(team_id)`` one query
takes the team's *stamp* — for each configuration table, how many rows the team has there, the
newest id and the latest change (``updated_at``, moved by every save) — and ``kept`` serves
what it read before under the same stamp, from this process's memory. Any row added, changed or
removed (an edit in the admin, a saved agent version, an MCP refresh, a tool added to an agent)
changes the stamp, so the next turn reads afresh: nothing is served that the database no longer
says. Outside the block ``kept`` just reads.

What ``kept`` returns is shared by every turn of the process: read it, never change it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from django.db import connection

from agents.models import (
    Agent,
    Hook,
    McpServer,
    ModelRoute,
    Provider,
    ProviderModel,
    RoutingRule,
    Tool,
)
from traces.models import Budget

T = TypeVar("T")

# Read with the team's id: (table, the column that names the team, or a join to it).
_TEAM_TABLES = (Agent, Provider, Tool, RoutingRule, ModelRoute, McpServer, Hook, Budget)
# Tables whose rows belong to a team through another table: (model, its column, the owner).
_OWNED_TABLES = ((ProviderModel, "provider_id", Provider),
                 (Agent.tools.through, "agent_id", Agent),
                 (Hook.agents.through, "hook_id", Hook))
KEPT_MAX = 4096

_stamps: ContextVar[dict[int, tuple[Any, ...]] | None] = ContextVar("team_config_stamps", default=None)
_kept: dict[tuple[Hashable, ...], tuple[tuple[Any, ...], Any]] = {}
_kept_lock = threading.Lock()
_sql: list[str] = []


def _stamp_sql() -> str:
    if not _sql:
        quote = connection.ops.quote_name
        parts = []
        for model in _TEAM_TABLES:
            table = quote(model._meta.db_table)
            parts.append(f"SELECT COUNT(*), MAX(id), MAX(updated_at) FROM {table} WHERE team_id = %s")  # noqa: S608 - model table names
        for model, column, owner in _OWNED_TABLES:
            table, owners = quote(model._meta.db_table), quote(owner._meta.db_table)
            changed = "MAX(updated_at)" if any(f.name == "updated_at" for f in model._meta.fields) else "NULL"
            parts.append(f"SELECT COUNT(*), MAX(id), {changed} FROM {table} WHERE {quote(column)} IN "  # noqa: S608 - model table and column names
                         f"(SELECT id FROM {owners} WHERE team_id = %s)")
        _sql.append(" UNION ALL ".join(parts))
    return _sql[0]


def team_config_stamp(team_id: int) -> tuple[Any, ...]:
    """What changes whenever the team's configuration does (one query)."""
    count = len(_TEAM_TABLES) + len(_OWNED_TABLES)
    with connection.cursor() as cursor:
        cursor.execute(_stamp_sql(), [team_id] * count)
        return tuple(tuple(row) for row in cursor.fetchall())


@contextmanager
def team_config_read(team_id: int) -> Iterator[None]:
    """Inside the block, ``kept`` serves the team's configuration from this process's memory
    while it has not changed (the stamp is taken once, here)."""
    stamps = dict(_stamps.get() or {})
    if team_id not in stamps:  # an enclosing block took it already
        stamps[team_id] = team_config_stamp(team_id)
    token = _stamps.set(stamps)
    try:
        yield
    finally:
        _stamps.reset(token)


def team_config_changed(team_id: int) -> None:
    """This block changed the team's configuration (an MCP server's tools refreshed): what it
    reads from now on is read afresh."""
    stamps = _stamps.get()
    if stamps is not None and team_id in stamps:
        stamps[team_id] = team_config_stamp(team_id)


def kept(team_id: int, key: tuple[Hashable, ...], read: Callable[[], T]) -> T:
    """``read()``'s value, kept per process under ``key`` while the team's configuration is
    unchanged (inside ``team_config_read``; outside, just ``read()``)."""
    stamps = _stamps.get()
    stamp = stamps.get(team_id) if stamps else None
    if stamp is None:
        return read()
    full = (team_id, *key)
    hit = _kept.get(full)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    value = read()
    with _kept_lock:
        if len(_kept) >= KEPT_MAX:
            _kept.clear()
        _kept[full] = (stamp, value)
    return value
