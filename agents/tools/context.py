"""What a turn's tools are bound to: the team, agent, user and conversation of the turn, and how
they reach the database from the turn's event loop.

Tools never take these from the model's arguments: a memory tool built for team A's turn can
only read and write team A's memory, whatever the model passes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from asgiref.sync import sync_to_async

from . import net

T = TypeVar("T")


class DbRunner(Protocol):
    """Runs a synchronous database function off the event loop: ``await db(fn, *args)``."""

    def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Awaitable[T]: ...


async def run_sync(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """The default runner: Django's thread-sensitive ``sync_to_async`` (a worker passes its
    turn's own database thread instead)."""
    return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)


@dataclass(frozen=True)
class ToolContext:
    team_id: int
    agent_id: int | None = None
    user_id: int | None = None
    conversation_id: int | None = None
    # The end user of the person's API key the turn is for (the conversation's); "": the person.
    end_user: str = ""
    trace_id: int | None = None
    timezone: str = "UTC"
    # The role in the team of the person whose turn it is ("" when unknown): the tools'
    # role floor reads it.
    role: str = ""
    memory_recall_limit: int = 5
    memory_min_relevance: float = 0.0
    db: DbRunner = run_sync
    # Looked up when the context is made, so a test can replace ``net.default_fetcher``.
    fetcher: net.Fetcher = field(default_factory=lambda: net.default_fetcher())
