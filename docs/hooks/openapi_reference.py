"""An MkDocs hook (``hooks:`` in mkdocs.yml): the API reference page is rendered at build time
from the schema the code serves, so that it cannot drift from it.

It sets up Django with the project's settings (``DEBUG=1`` unless the environment says
otherwise: nothing is served and no database is opened), asks the django-ninja API object
(``agents.api.site.api``) for its OpenAPI schema, and

* fills the page ``api-reference.md`` where it says ``<!-- openapi-reference -->``: per
  operation its method, path, summary, description, parameters, request body and responses,
  then every schema's fields;
* adds the schema itself to the site as ``openapi.json``, next to that page.

A page without the marker, or an API without operations, stops the build.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from typing import Any

PAGE = "api-reference.md"
MARKER = "<!-- openapi-reference -->"
SCHEMA_FILE = "openapi.json"
REF_PREFIX = "#/components/schemas/"


@cache
def schema() -> dict[str, Any]:
    """The OpenAPI schema of the project's API, as ``/api/v1/openapi.json`` serves it."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()
    from agents.api.site import api

    return api.get_openapi_schema()


# -- MkDocs events ------------------------------------------------------------------------------
def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, SCHEMA_FILE, content=json.dumps(schema(), indent=2)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} has lost its {MARKER} marker: nothing to fill")
    return markdown.replace(MARKER, render(schema()))


# -- rendering ----------------------------------------------------------------------------------
METHODS = ("get", "post", "put", "patch", "delete")


def render(spec: dict[str, Any]) -> str:
    """The reference as markdown: the operations grouped by tag, then the schemas."""
    groups: dict[str, list[tuple[str, str, dict]]] = {}
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                operation = item[method]
                tag = (operation.get("tags") or ["Other"])[0]
                groups.setdefault(tag, []).append((method, path, operation))
    if not groups:
        raise ValueError("the API's schema lists no operations")
    out = [index(groups)]
    for tag, operations in groups.items():
        out.append(f"## {tag[:1].upper()}{tag[1:]}\n")
        out.extend(render_operation(method, path, operation) for method, path, operation in operations)
    out.append("## Schemas\n")
    out.extend(render_schema(name, body) for name, body in spec["components"]["schemas"].items())
    return "\n".join(out)


def index(groups: dict[str, list[tuple[str, str, dict]]]) -> str:
    rows = ["| method | path | what it does |", "|---|---|---|"]
    for operations in groups.values():
        for method, path, operation in operations:
            rows.append(f"| `{method.upper()}` | [`{path}`](#{anchor(operation)}) | "
                        f"{cell(operation.get('summary', ''))} |")
    return "\n".join(rows) + "\n"


def anchor(operation: dict) -> str:
    return "op-" + operation["operationId"].replace("_", "-")


def render_operation(method: str, path: str, operation: dict) -> str:
    out = [f"### `{method.upper()} {path}` {{#{anchor(operation)}}}\n"]
    if operation.get("summary"):
        out.append(f"**{prose(operation['summary'])}** (operation `{operation['operationId']}`)\n")
    if operation.get("description"):
        out.append(prose(operation["description"].strip()) + "\n")
    if not operation.get("security", True):
        out.append("No key needed.\n")
    parameters = operation.get("parameters") or []
    if parameters:
        out.append("Parameters:\n")
        out.append("| name | in | type | required | description |\n|---|---|---|---|---|")
        for p in parameters:
            description = p.get("description") or p.get("schema", {}).get("description", "")
            out.append(f"| `{p['name']}` | {p['in']} | {type_of(p.get('schema', {}))}"
                       f"{default_of(p.get('schema', {}))} | {'yes' if p.get('required') else 'no'} | "
                       f"{cell(description)} |")
        out.append("")
    body = operation.get("requestBody")
    if body:
        for content_type, media in body.get("content", {}).items():
            required = "" if body.get("required") else " (optional)"
            out.append(f"Request body{required}: `{content_type}`, {type_of(media.get('schema', {}))}.\n")
    out.append("Responses:\n")
    out.append("| status | description | body |\n|---|---|---|")
    for status, response in operation.get("responses", {}).items():
        content = response.get("content") or {}
        shapes = "; ".join(f"`{ct}` {type_of(media.get('schema', {}))}" for ct, media in content.items())
        out.append(f"| {status} | {cell(response.get('description', ''))} | {shapes or '—'} |")
    out.append("")
    return "\n".join(out)


def render_schema(name: str, body: dict) -> str:
    out = [f"### {name} {{#schema-{name.lower()}}}\n"]
    if body.get("description"):
        out.append(prose(" ".join(body["description"].split())) + "\n")
    properties = body.get("properties") or {}
    if body.get("enum"):
        out.append("One of: " + ", ".join(f"`{v}`" for v in body["enum"]) + ".\n")
    if properties:
        required = set(body.get("required") or [])
        out.append("| field | type | required | description |\n|---|---|---|---|")
        for field, prop in properties.items():
            out.append(f"| `{field}` | {type_of(prop)}{default_of(prop)} | "
                       f"{'yes' if field in required else 'no'} | {cell(prop.get('description', ''))} |")
        out.append("")
    if body.get("additionalProperties") is True and properties:
        out.append("Other fields are accepted.\n")
    return "\n".join(out)


def type_of(s: dict) -> str:
    """A JSON schema as a short type: ``string``, ``integer ≤ 200``, ``array of [Step](…)``,
    ``string or null``, ``"a" | "b"``."""
    if "$ref" in s:
        name = s["$ref"].removeprefix(REF_PREFIX)
        return f"[{name}](#schema-{name.lower()})"
    for combinator in ("anyOf", "oneOf"):
        if combinator in s:
            return " or ".join(dict.fromkeys(type_of(option) for option in s[combinator]))
    if "allOf" in s and len(s["allOf"]) == 1:
        return type_of(s["allOf"][0])
    if "enum" in s:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    if "const" in s:
        return f"`{json.dumps(s['const'])}`"
    kind = s.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        least = f" (at least {s['minItems']})" if s.get("minItems") else ""
        return f"array of {type_of(s.get('items', {}))}{least}"
    if kind == "object" and isinstance(s.get("additionalProperties"), dict):
        return f"object of {type_of(s['additionalProperties'])}"
    if s.get("format"):
        kind = f"{kind} ({s['format']})"
    if "minimum" in s and "maximum" in s:
        kind = f"{kind}, {s['minimum']} to {s['maximum']}"
    elif "minimum" in s or "exclusiveMinimum" in s:
        kind = f"{kind} ≥ {s['minimum']}" if "minimum" in s else f"{kind} > {s['exclusiveMinimum']}"
    elif "maximum" in s:
        kind = f"{kind} ≤ {s['maximum']}"
    return kind


def default_of(s: dict) -> str:
    return f", default `{json.dumps(s['default'])}`" if "default" in s else ""


def cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return prose(" ".join(str(text).split())).replace("|", "\\|")


def prose(text: str) -> str:
    """The schema's words as markdown: ``<slug>`` outside code is text, not an HTML tag."""
    parts = re.split(r"(`+[^`]*`+)", text)
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;")
                   for part in parts)
