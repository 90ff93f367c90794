"""The format a request asks the answer to have (OpenAI's ``response_format`` / the Responses
API's ``text.format``: a JSON object, or JSON matching a schema), enforced by the product.

Every answer is checked (``answer_check``): JSON, an object, and valid under the schema when
one is given, its ``pattern`` regexes run on RE2 as a tool's are (``agents.tools.validation``).
A provider that takes the format natively is sent it; for one that does not, the instructions
(``answer_instructions``) ask for it in a system block. An answer that fails the check gets one
more request saying what is wrong (``agents.runtime.loop.turn``); a second failure fails the
turn with a sentence naming the problem, never prose passed off as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agents.tools.validation import ArgumentsValidator, argument_problem, json_schema_problem

MAX_SCHEMA_CHARS = 64_000


def format_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema a ``json_schema`` format asks for (None for ``json_object``)."""
    spec = (response_format or {}).get("json_schema") or {}
    schema = spec.get("schema")
    return schema if isinstance(schema, dict) else None


def format_problem(response_format: dict[str, Any] | None) -> str | None:
    """Why the format cannot be asked for, as a sentence (a schema that is not one, too large,
    or with a pattern RE2 refuses); None when it can."""
    schema = format_schema(response_format)
    if schema is None:
        return None
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        return f"The JSON schema is over {MAX_SCHEMA_CHARS:,} characters."
    problem = json_schema_problem(schema)
    if problem is None and schema.get("type", "object") != "object":
        problem = 'The answer is a JSON object: set "type": "object" at the top of the schema.'
    return problem


def answer_check(response_format: dict[str, Any]) -> Callable[[str], str | None]:
    """The check of an answer under ``response_format``: its problem, or None."""
    schema = format_schema(response_format)
    validator = ArgumentsValidator(schema) if schema is not None else None

    def check(text: str) -> str | None:
        try:
            value = json.loads(text)
        except ValueError as exc:
            return f"it is not JSON ({exc.msg} at character {exc.pos})"
        if not isinstance(value, dict):
            return "it is JSON but not an object"
        if validator is not None:
            problem = argument_problem(validator, value)
            if problem is not None:
                return f"it does not match the JSON schema: {problem}"
        return None

    return check


def answer_instructions(response_format: dict[str, Any]) -> str:
    """The system block that asks a model, which is not sent the format, for it."""
    text = ("## Answer format\n\nAnswer with one JSON object and nothing else: no prose before "
            "or after it, no code fences.")
    schema = format_schema(response_format)
    if schema is not None:
        text += f" It must match this JSON schema:\n\n{json.dumps(schema, indent=1)}"
    return text
