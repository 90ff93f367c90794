"""``sanitize_response.json``: the channel reply pipeline and its steps (spec §12).

``sanitize_channel_response`` is ZeroClaw's pipeline; our ``sanitize_response`` adds think/
tool-result stripping and the malformed-reply fallback around it (tested in test_sanitize.py).
No deviations.
"""

from __future__ import annotations

import pytest

from agents.runtime import sanitize
from agents.runtime.parsing import strip_think_tags
from tests.agents.runtime.conformance import vectors


def run(fn: str, data):
    if fn == "strip_think_tags":
        return strip_think_tags(data)
    if fn == "sanitize_channel_response":
        return sanitize.sanitize_channel_response(data["response"], data["known_tools"])
    if fn == "strip_isolated_tool_json_artifacts":
        return sanitize.strip_isolated_tool_json_artifacts(data["message"], data["known_tools"])
    return getattr(sanitize, fn)(data)


@pytest.mark.parametrize("vector", vectors("sanitize_response.json"))
def test_sanitize_response(vector):
    assert run(vector["fn"], vector["input"]) == vector["expected"]
