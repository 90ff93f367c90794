"""Reading spans back from a Phoenix server through its REST API.

``GET <url>/v1/projects/<project>/spans`` (the project by name or by its GlobalID) answers
``{"data": [span, ...], "next_cursor": str | null}``; ``limit`` is at most 1000, ``cursor`` is
the previous page's ``next_cursor`` (with the same ``sort``/``order``), ``trace_id`` and
``span_id`` may repeat, ``parent_id=null`` keeps root spans. An unknown project answers 404.

Phoenix ingests asynchronously: ``POST /v1/traces`` answers 200 before the spans are stored
(a background queue writes them about every 0.1 s), so a test polls with ``wait_for_spans``.

What Phoenix keeps of a span, as ``spans()`` returns it (one dict per span):

* ``name``, ``trace_id``, ``span_id`` (lowercase hex), ``parent_id`` (``None`` for a root);
* ``span_kind``: Phoenix's OpenInference kind (``LLM``, ``AGENT``, ``TOOL``, ``CHAIN``,
  ``EMBEDDING``, ``RETRIEVER``, ..., ``UNKNOWN``), taken from ``openinference.span.kind`` or
  derived from ``gen_ai.operation.name`` (chat -> LLM, invoke_agent -> AGENT, execute_tool ->
  TOOL, ...); the OTel span kind (CLIENT, INTERNAL, ...) is not kept;
* ``start_time``, ``end_time``: timezone-aware ``datetime`` (UTC, microseconds);
* ``status_code`` (``"OK"``, ``"ERROR"``, ``"UNSET"``) and ``status_message``;
* ``attributes``: a flat dict with the dotted keys as sent (``"gen_ai.request.model"``), arrays
  as lists. Phoenix stores them nested and flattens them again on the way out; alongside the
  ``gen_ai.*`` keys it adds OpenInference ones it synthesised from them (``llm.model_name``,
  ``llm.provider``, ``llm.system``, ``llm.token_count.*``, ``llm.invocation_parameters``, ...),
  never overriding a key the span carried. ``openinference.span.kind`` is not among them (it is
  ``span_kind``);
* ``events``: ``[{"name", "timestamp" (datetime), "attributes" (flat dict)}]``;
* ``phoenix_id``: Phoenix's own GlobalID of the span.

Resource attributes are not kept: ``openinference.project.name`` only picks the project
(``default`` without it; an ``x-project-name`` request header wins over it).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

PAGE = 1000


def projects(base_url: str) -> list[dict[str, Any]]:
    """Every project: ``[{"name", "id" (GlobalID), "description"}]``."""
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 100}
    while True:
        body = _get(base_url, "/v1/projects", params)
        found.extend(body["data"])
        if not body.get("next_cursor"):
            return found
        params["cursor"] = body["next_cursor"]


def project_id(base_url: str, project: str) -> str | None:
    """The GlobalID of the project named ``project``, ``None`` when there is none."""
    return next((p["id"] for p in projects(base_url) if p["name"] == project), None)


def spans(base_url: str, project: str, trace_id_hex: str | None = None) -> list[dict[str, Any]]:
    """The spans of ``project`` (of one trace when ``trace_id_hex`` is given), oldest start
    first; ``[]`` when the project does not exist (yet)."""
    params: dict[str, Any] = {"limit": PAGE, "sort": "start_time", "order": "asc"}
    if trace_id_hex:
        params["trace_id"] = trace_id_hex.lower()
    found: list[dict[str, Any]] = []
    while True:
        body = _get(base_url, f"/v1/projects/{quote(project, safe='')}/spans", params)
        if body is None:
            return []
        found.extend(_span(raw) for raw in body["data"])
        if not body.get("next_cursor"):
            return found
        params["cursor"] = body["next_cursor"]


def wait_for_spans(base_url: str, project: str, trace_id_hex: str | None = None, *,
                   count: int = 1, timeout_s: float = 15.0) -> list[dict[str, Any]]:
    """``spans()`` once it returns at least ``count`` spans; ``AssertionError`` after
    ``timeout_s`` saying what arrived."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = spans(base_url, project, trace_id_hex)
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            names = [span["name"] for span in found]
            raise AssertionError(f"{len(found)} of {count} spans in Phoenix project {project!r}"
                                 f" (trace {trace_id_hex or 'any'}) after {timeout_s} s: {names}")
        time.sleep(0.2)


def by_name(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The spans keyed by name (the last one wins when names repeat)."""
    return {span["name"]: span for span in found}


def trace_url(base_url: str, trace_id_hex: str) -> str:
    """The UI's link to a trace that needs no project: the page redirects to
    ``/projects/<project GlobalID>/traces/<trace id>``."""
    return f"{base_url.rstrip('/')}/redirects/traces/{trace_id_hex.lower()}"


def project_trace_url(base_url: str, project_global_id: str, trace_id_hex: str) -> str:
    """The UI's own page of a trace, in its project (see ``project_id``)."""
    return f"{base_url.rstrip('/')}/projects/{project_global_id}/traces/{trace_id_hex.lower()}"


def _get(base_url: str, path: str, params: dict[str, Any]) -> dict[str, Any] | None:
    response = httpx.get(f"{base_url.rstrip('/')}{path}", params=params, timeout=30)
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return response.json()


def _span(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": raw["name"],
        "trace_id": raw["context"]["trace_id"],
        "span_id": raw["context"]["span_id"],
        "parent_id": raw.get("parent_id"),
        "span_kind": raw["span_kind"],
        "start_time": datetime.fromisoformat(raw["start_time"]),
        "end_time": datetime.fromisoformat(raw["end_time"]),
        "status_code": raw["status_code"],
        "status_message": raw.get("status_message") or "",
        "attributes": dict(raw.get("attributes") or {}),
        "events": [{"name": event["name"],
                    "timestamp": datetime.fromisoformat(event["timestamp"]),
                    "attributes": dict(event.get("attributes") or {})}
                   for event in raw.get("events") or []],
        "phoenix_id": raw.get("id", ""),
    }
