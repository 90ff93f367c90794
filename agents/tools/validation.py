"""JSON-schema checks for tool parameters: the schema itself when a tool is saved, and every
call's arguments before the tool runs.

Schemas are written by tenants, so their ``pattern`` and ``patternProperties`` regexes run on
RE2 (``agents.runtime.patterns``, linear time) instead of jsonschema's ``re``: the validator
is Draft 2020-12 with those keywords (and ``additionalProperties``, which consults
``patternProperties``) replaced, and a schema whose patterns RE2 refuses is refused on save.

An invalid call is a ``ToolError`` whose message names the argument and the problem, so the
model can correct the call and try again."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match

from agents.runtime.patterns import PatternError, compile_pattern, pattern_problem
from agents.runtime.tools import Tool, ToolError, ToolResult

MAX_PROBLEMS_SHOWN = 3


# -- linear-time patterns -------------------------------------------------------------------------
def _matches(pattern: str, text: str) -> bool:
    try:
        return compile_pattern(pattern).search(text) is not None
    except PatternError:
        return False  # refused on save; a stored one never matches rather than failing the call


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in properties
              and not any(_matches(p, key) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        names = ", ".join(repr(e) for e in sorted(extras, key=str))
        yield ValidationError(f"Additional properties are not allowed ({names} "
                              f"{'was' if len(extras) == 1 else 'were'} unexpected)")


ArgumentsValidator = validators.extend(Draft202012Validator, {
    "pattern": _pattern, "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
})


def _patterns_in(schema: Any) -> list[str]:
    """Every regex of a schema: ``pattern`` values and ``patternProperties`` keys, at any depth."""
    found: list[str] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                found.append(value)
            elif key == "patternProperties" and isinstance(value, dict):
                found.extend(str(k) for k in value)
            found.extend(_patterns_in(value))
    elif isinstance(schema, list):
        for item in schema:
            found.extend(_patterns_in(item))
    return found


def json_schema_problem(schema: dict[str, Any], *, what: str = "The JSON schema") -> str | None:
    """Why ``schema`` is not a JSON schema this validator can run (invalid, or a pattern RE2
    refuses), in a sentence; None when it is."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = _path(exc.path) or _path(exc.schema_path)
        at = f" (at {where})" if where else ""
        verb = "are" if what == "The parameters" else "is"
        return f"{what} {verb} not a valid JSON schema{at}: {exc.message}."
    for pattern in _patterns_in(schema):
        problem = pattern_problem(pattern)
        if problem is not None:
            return f"{what} has a pattern that cannot be used. {problem}"
    return None


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot describe a tool's arguments, in a sentence; None when it can."""
    if not isinstance(schema, dict):
        return "The parameters must be a JSON object (a JSON schema), for example {\"type\": \"object\", \"properties\": {}}."
    problem = json_schema_problem(schema, what="The parameters")
    if problem is not None:
        return problem.replace("The parameters has a pattern", "The parameters schema has a pattern")
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


def argument_problem(validator: Any, arguments: Any) -> str | None:
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

    def __init__(self, inner: Tool, *, policy: str | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.description = inner.description
        self.parameters = inner.parameters
        self.policy = inner.policy if policy is None else policy
        self.idempotent = inner.idempotent
        self._validator = ArgumentsValidator(self.parameters)
        # The tool's own time limit (HTTP tools), for the loop's limit per call.
        self.timeout_s: float | None = getattr(inner, "timeout_s", None)
        self.step_meta = inner.step_meta

    def arguments_problem(self, arguments: dict[str, Any]) -> str | None:
        return argument_problem(self._validator, arguments)

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        problem = argument_problem(self._validator, arguments)
        if problem is not None:
            raise ToolError(f"Invalid arguments for tool '{self.name}': {problem}. Call it again "
                            "with arguments that match its parameters.")
        return await self.inner.execute(arguments)
