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
    # Small facts for the trace step (an MCP call's server, remote name, protocol, session).
    meta: dict[str, Any] = field(default_factory=dict)

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


ALLOW, ASK, DENY = "allow", "ask", "deny"
POLICIES = (ALLOW, ASK, DENY)


class Tool(abc.ABC):
    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012
    # What happens when the model calls it: "allow" runs it, "ask" puts it to a person first,
    # "deny" never runs it (the model reads ``Permission denied: <policy_reason>``).
    policy: str = ALLOW
    policy_reason: str = ""
    # Where the policy came from, for the trace ("tool", "agent", "role floor" …).
    policy_source: str = ""
    # Safe to run again with the same arguments when a turn continues after its worker stopped
    # while the call ran (a read, a pure computation). Otherwise the call is not repeated and
    # the model is told it was interrupted.
    idempotent: bool = False
    # What it is, as the GenAI conventions name it: "function" (run in the worker),
    # "extension" (a call out to a server or an API), "datastore" (the team's memory).
    tool_type: str = "function"

    @abc.abstractmethod
    async def execute(self, arguments: dict[str, Any]) -> ToolResult: ...

    def arguments_problem(self, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` do not fit the tool's parameters, in a sentence; None when they do
        (or when the tool does not check: by default)."""
        return None

    def step_meta(self) -> dict[str, Any]:
        """What the tool is, for its call's step whatever the call's outcome (run, denied,
        cancelled, failed): its ``tool_type`` and, for a server's tool, what names the server
        and the call. A run's own meta goes over it."""
        return {"tool_type": self.tool_type}

    async def prepare_call(self, arguments: dict[str, Any]) -> None:
        """Called before a call's permission is decided (``policy_for``), for what that needs
        to read first (a replay looks the call up in its record); by default nothing."""
        return None

    def policy_for(self, arguments: dict[str, Any]) -> str:
        """The policy of one call with ``arguments`` (a replay lets a recorded call through
        without asking anyone, ``agents.runtime.replay``); by default the tool's own."""
        return self.policy

    @property
    def requires_approval(self) -> bool:
        return self.policy == ASK

    @requires_approval.setter
    def requires_approval(self, value: bool) -> None:
        self.policy = ASK if value else ALLOW

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
        policy: str | None = None,
    ) -> None:
        self.name = name
        self.idempotent = idempotent
        self.description = description
        self.parameters = parameters or {"type": "object", "properties": {}}
        self.policy = policy or (ASK if requires_approval else ALLOW)
        self._fn = fn

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        result = await self._fn(arguments)
        return result if isinstance(result, ToolResult) else ToolResult.ok(str(result))
