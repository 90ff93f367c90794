"""ZeroClaw ``src/providers/reliable.rs`` classifiers, backoff and truncation (reliable.json)."""

from __future__ import annotations

import copy

import pytest

from agents.runtime.providers import retry_rules
from tests.agents.runtime.conformance import approx_equal, vectors

STRING_FUNCTIONS = (
    "is_non_retryable", "is_auth_error", "parse_retry_after_ms", "is_rate_limited",
    "is_non_retryable_rate_limit", "is_context_window_exceeded", "is_tool_schema_error",
)


@pytest.mark.parametrize("vector", vectors("reliable.json", *STRING_FUNCTIONS))
def test_classifier(vector):
    fn = getattr(retry_rules, vector["fn"])
    assert fn(vector["input"]) == vector["expected"]


@pytest.mark.parametrize("vector", vectors("reliable.json", "compute_backoff"))
def test_compute_backoff(vector):
    given = vector["input"]
    assert retry_rules.compute_backoff(given["base"], given["error"]) == vector["expected"]


@pytest.mark.parametrize("vector", vectors("reliable.json", "truncate_for_context"))
def test_truncate_for_context(vector):
    messages = copy.deepcopy(vector["input"])
    dropped = retry_rules.truncate_for_context(messages)
    assert approx_equal({"dropped": dropped, "messages": messages}, vector["expected"])


def test_every_vector_function_is_covered():
    fns = {v.values[0]["fn"] for v in vectors("reliable.json") if v.values[0] is not None}
    assert fns <= {*STRING_FUNCTIONS, "compute_backoff", "truncate_for_context"}
