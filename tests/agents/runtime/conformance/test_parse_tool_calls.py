"""``parse_tool_calls.json``: ZeroClaw's ``parse_tool_calls`` on every syntax it understands.

Every vector must give the same text, call names, arguments and ids (``tool_call_id`` is our
``ToolCall.id``). There are no deviations.
"""

from __future__ import annotations

import pytest

from agents.runtime.parsing import ToolCall, parse_tool_calls
from tests.agents.runtime.conformance import approx_equal, vectors


def as_vector_output(text: str, calls: list[ToolCall]) -> dict:
    out = []
    for call in calls:
        item = {"name": call.name, "arguments": call.arguments}
        if call.id is not None:
            item["tool_call_id"] = call.id
        out.append(item)
    return {"text": text, "calls": out}


@pytest.mark.parametrize("vector", vectors("parse_tool_calls.json", "parse_tool_calls"))
def test_parse_tool_calls(vector):
    text, calls = parse_tool_calls(vector["input"])
    assert approx_equal(as_vector_output(text, calls), vector["expected"])
