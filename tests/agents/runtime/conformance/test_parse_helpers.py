"""``parse_helpers.json``: the parser's helpers (alias map, default params, GLM shorthand, JSON
extraction, call shapes, arguments, parse-issue note, display text, native history JSON).

``build_native_assistant_history*`` return serialised JSON whose keys serde sorted, so those
are compared as strings; everything else semantically. No deviations.
"""

from __future__ import annotations

import pytest

from agents.runtime import parsing
from agents.runtime.parsing import ToolCall
from tests.agents.runtime.conformance import approx_equal, vectors


def call_dict(call: ToolCall | None) -> dict | None:
    if call is None:
        return None
    item = {"name": call.name, "arguments": call.arguments}
    if call.id is not None:
        item["tool_call_id"] = call.id
    return item


def run(fn: str, data):
    if fn in ("map_tool_name_alias", "default_param_for_tool", "extract_json_values"):
        return getattr(parsing, fn)(data)
    if fn in ("parse_glm_shortened_body", "parse_tool_call_value"):
        return call_dict(getattr(parsing, fn)(data))
    if fn == "parse_tool_calls_from_json_value":
        return [call_dict(c) for c in parsing.parse_tool_calls_from_json_value(data)]
    if fn == "parse_glm_style_tool_calls":
        return [{"name": n, "arguments": a, "raw": r}
                for n, a, r in parsing.parse_glm_style_tool_calls(data)]
    if fn == "parse_arguments_value":
        return parsing.parse_arguments_value() if data is None else \
            parsing.parse_arguments_value(data["raw"])
    if fn == "resolve_display_text":
        return parsing.resolve_display_text(data["response_text"], data["parsed_text"],
                                            data["has_tool_calls"], data["has_native_tool_calls"])
    if fn == "detect_tool_call_parse_issue":
        _text, calls = parsing.parse_tool_calls(data)
        return parsing.detect_tool_call_parse_issue(data, calls)
    if fn == "build_native_assistant_history":
        return parsing.build_native_assistant_history(data["text"], data["tool_calls"],
                                                      data.get("reasoning_content"))
    if fn == "build_native_assistant_history_from_parsed_calls":
        calls = [ToolCall(c["name"], c["arguments"], c.get("tool_call_id")) for c in data["calls"]]
        return parsing.build_native_assistant_history_from_parsed_calls(
            data["text"], calls, data.get("reasoning_content"))
    raise AssertionError(f"no runner for {fn}")


@pytest.mark.parametrize("vector", vectors("parse_helpers.json"))
def test_parse_helpers(vector):
    got = run(vector["fn"], vector["input"])
    if vector["fn"].startswith("build_native_assistant_history"):
        assert got == vector["expected"]
    else:
        assert approx_equal(got, vector["expected"])
