"""JSON-schema checks for tool parameters: the schema itself when a tool is saved, and every
call's arguments before the tool runs.

An invalid call is a ``ToolError`` whose message names the argument and the problem, so the
model can correct the call and try again."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match

from agents.runtime.tools import Tool, ToolError, ToolResult

MAX_PROBLEMS_SHOWN = 3


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot describe a tool's arguments, in a sentence; None when it can."""
    if not isinstance(schema, dict):
        return "The parameters must be a JSON object (a JSON schema), for example {\"type\": \"object\", \"properties\": {}}."
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = _path(exc.path) or _path(exc.schema_path)
        at = f" (at {where})" if where else ""
        return f"The parameters are not a valid JSON schema{at}: {exc.message}."
    if schema.get("type") != "object":
        return 'The parameters schema must describe an object: set "type": "object" at the top.'
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        return 'The "properties" of the parameters schema must be an object.'
    return None


def _path(parts: Any) -> str:
    return "/".join(str(p) for p in parts)


def _describe(error: ValidationError) -> str:
    where = ".".join(str(p) for p in error.absolute_path)
    return f"'{where}': {error.message}" if where else error.message


def argument_problem(validator: Draft202012Validator, arguments: Any) -> str | None:
    """The problems of ``arguments`` under the tool's schema, most relevant first; None when
    they are valid."""
    errors = list(validator.iter_errors(arguments))
    if not errors:
        return None
    first = best_match(errors)
    others = [e for e in errors if e is not first][:MAX_PROBLEMS_SHOWN - 1]
    return "; ".join(_describe(e) for e in [first, *others])


class CheckedTool(Tool):
    """A tool whose arguments are validated against its JSON schema before every call."""

    def __init__(self, inner: Tool, *, requires_approval: bool | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.description = inner.description
        self.parameters = inner.parameters
        self.requires_approval = (inner.requires_approval if requires_approval is None
                                  else requires_approval)
        self.idempotent = inner.idempotent
        self._validator = Draft202012Validator(self.parameters)
        # The tool's own time limit (HTTP tools), for the loop's limit per call.
        self.timeout_s: float | None = getattr(inner, "timeout_s", None)

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        problem = argument_problem(self._validator, arguments)
        if problem is not None:
            raise ToolError(f"Invalid arguments for tool '{self.name}': {problem}. Call it again "
                            "with arguments that match its parameters.")
        return await self.inner.execute(arguments)
