"""Tools as the runtime sees them: a name, a JSON-schema, and an async ``execute``.

Concrete tools (calculator, memory, HTTP) live outside the runtime and are bound to their team,
agent and user when the Django side builds the tool list for a turn, so ``execute`` takes only
the arguments the model gave.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is told about a tool."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass(frozen=True, slots=True)
class ToolResult:
    success: bool
    output: str
    error: str | None = None

    @classmethod
    def ok(cls, output: str) -> ToolResult:
        return cls(True, output)

    @classmethod
    def fail(cls, error: str, output: str = "") -> ToolResult:
        return cls(False, output, error)


class ToolError(Exception):
    """Raised by a tool for a failure the model should see. ``retryable`` says whether the same
    call may succeed later (a timeout) or never will (bad arguments)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class Tool(abc.ABC):
    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012
    requires_approval: bool = False
    # Safe to run again with the same arguments when a turn continues after its worker stopped
    # while the call ran (a read, a pure computation). Otherwise the call is not repeated and
    # the model is told it was interrupted.
    idempotent: bool = False

    @abc.abstractmethod
    async def execute(self, arguments: dict[str, Any]) -> ToolResult: ...

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


class FunctionTool(Tool):
    """A tool made from an async function ``fn(arguments) -> ToolResult | str``."""

    def __init__(
        self,
        name: str,
        description: str,
        fn: Callable[[dict[str, Any]], Awaitable[ToolResult | str]],
        *,
        parameters: dict[str, Any] | None = None,
        requires_approval: bool = False,
        idempotent: bool = False,
    ) -> None:
        self.name = name
        self.idempotent = idempotent
        self.description = description
        self.parameters = parameters or {"type": "object", "properties": {}}
        self.requires_approval = requires_approval
        self._fn = fn

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        result = await self._fn(arguments)
        return result if isinstance(result, ToolResult) else ToolResult.ok(str(result))
