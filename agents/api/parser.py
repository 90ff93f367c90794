"""Request bodies of the API: JSON only, held to the rules every form of the site follows
(``agentsite.inputs``): control characters other than tab and line breaks are stripped from
every string, and nesting deeper than ``MAX_JSON_DEPTH`` is refused with a 400 that says so,
before the parser could recurse that deep."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from ninja.parser import Parser

from agents.api.errors import ApiError
from agentsite.inputs import MAX_JSON_DEPTH, json_depth, strip_controls


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return strip_controls(value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {strip_controls(k): _clean(v) for k, v in value.items()}
    return value


class SafeJsonParser(Parser):
    def parse_body(self, request: HttpRequest) -> Any:
        if request.content_type and request.content_type != "application/json":
            raise ApiError(400, f"Send the body as JSON (Content-Type: application/json), not "
                                f"{request.content_type}.", code="unsupported_media_type")
        try:
            text = request.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ApiError(400, "The body is not UTF-8 text.", code="invalid_json") from exc
        if json_depth(text) > MAX_JSON_DEPTH:
            raise ApiError(400, f"The body's JSON is nested deeper than {MAX_JSON_DEPTH} levels, "
                                "which is not accepted.", code="invalid_json")
        try:
            return _clean(json.loads(text))
        except ValueError as exc:
            raise ApiError(400, f"The body is not valid JSON: {exc}.", code="invalid_json") from exc
