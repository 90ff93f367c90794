"""The API reference page is rendered from the schema the running API serves (the MkDocs hook
``docs/hooks/openapi_reference.py``): every operation and every schema is on it, and every link
on it leads to a section of it."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from django.test import Client

HOOK = Path(__file__).resolve().parents[2] / "docs" / "hooks" / "openapi_reference.py"


def hook():
    spec = importlib.util.spec_from_file_location("openapi_reference", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hook_reads_the_schema_the_api_serves():
    served = json.loads(Client().get("/api/v1/openapi.json").content)

    assert json.loads(json.dumps(hook().schema())) == served  # as JSON: status codes as strings


def test_every_operation_and_schema_is_on_the_page_and_every_link_lands():
    reference = hook()
    spec = reference.schema()
    page = reference.render(spec)

    for path, item in spec["paths"].items():
        for method, operation in item.items():
            assert f"### `{method.upper()} {path}` {{#op-{operation['operationId'].replace('_', '-')}}}" in page
    for name in spec["components"]["schemas"]:
        assert f"### {name} {{#schema-{name.lower()}}}" in page
    anchors = set(re.findall(r"\{#([\w-]+)\}", page))
    assert set(re.findall(r"\]\(#([\w-]+)\)", page)) <= anchors


def test_the_page_keeps_its_marker():
    page = (HOOK.parents[1] / "api-reference.md").read_text()

    assert hook().MARKER in page
