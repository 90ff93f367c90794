"""What a chat reply shows: ``sanitize_response`` and its steps beyond the conformance vectors."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.runtime.parsing import RUST_WS
from agents.runtime.sanitize import (
    MALFORMED_REPLY,
    _remove_tag_blocks,
    _remove_tool_results,
    sanitize_response,
    strip_isolated_tool_json_artifacts,
    strip_tool_call_tags,
    strip_tool_narration,
    strip_tool_result_blocks,
    strip_tool_result_content,
)
from tests.agents.runtime.parsing.test_parse_tool_calls import MIXED, repeat


def test_a_prompt_guided_turn_reduces_to_the_answer():
    reply = ("<think>I should run date.</think>Let me check.\n"
             "<tool_call>{\"name\":\"shell\",\"arguments\":{\"command\":\"date\"}}</tool_call>\n"
             "[Tool results]\n<tool_result name=\"shell\" status=\"ok\">\nMon\n</tool_result>\n"
             "It is Monday.")
    assert sanitize_response(reply, ["shell"]) == "It is Monday."


def test_reply_that_sanitizes_to_nothing_gets_the_malformed_message():
    assert sanitize_response("<tool_call>{\"name\":\"shell\",\"arguments\":{}}</tool_call>") \
        == MALFORMED_REPLY
    assert sanitize_response("<think>only reasoning, never closed") == MALFORMED_REPLY
    assert sanitize_response(" \n\t") == ""
    assert sanitize_response("") == ""


def test_narration_only_reply_is_kept_rather_than_emptied():
    assert sanitize_response("Let me check that for you.") == "Let me check that for you."
    assert strip_tool_narration("\n\nOne moment.\nChecking the logs...\n\nFound 3 errors.\n\nDone.") \
        == "Found 3 errors.\n\nDone."


def test_tool_json_is_removed_only_for_known_tools_and_only_on_its_own_line():
    message = ("{\"name\":\"shell\",\"arguments\":{\"command\":\"ls\"}}\n"
               "Call it like {\"name\":\"shell\",\"arguments\":{}} when needed.\n"
               "{\"name\":\"weather\",\"arguments\":{\"city\":\"Oslo\"}}\n"
               "{\"function\":{\"name\":\"SHELL\",\"arguments\":\"{}\"}}")
    assert strip_isolated_tool_json_artifacts(message, ["Shell"]) == (
        "Call it like {\"name\":\"shell\",\"arguments\":{}} when needed.\n"
        "{\"name\":\"weather\",\"arguments\":{\"city\":\"Oslo\"}}")


def test_tool_calls_envelope_is_replaced_by_its_content():
    envelope = json.dumps({"content": "  Here you go.  ",
                           "tool_calls": [{"name": "shell", "arguments": {}}]})
    assert strip_isolated_tool_json_artifacts(f"Intro\n{envelope}\nOutro", ["shell"]) \
        == "Intro\nHere you go.\nOutro"


def test_tool_result_json_is_removed_only_after_a_tool_call():
    result_line = "{\"result\": {\"ok\": true}, \"tool_call_id\": \"c1\"}"
    assert strip_isolated_tool_json_artifacts(f"{result_line}\nAnswer", ["shell"]) \
        == f"{result_line}\nAnswer"
    call_line = "{\"name\":\"shell\",\"arguments\":{}}"
    assert strip_isolated_tool_json_artifacts(f"{call_line}\n{result_line}\nAnswer", ["shell"]) \
        == "Answer"


def test_tool_call_tags_keep_the_text_around_them_as_written():
    assert strip_tool_call_tags("A <tool_call>{\"x\":1}</tool_call> B") == "A  B"
    assert strip_tool_call_tags("<function_calls><invoke name=\"a\"></invoke></function_calls>ok") \
        == "ok"
    assert strip_tool_call_tags("Keep <tool> this") == "Keep <tool> this"


def test_tool_result_helpers():
    assert strip_tool_result_blocks("<thinking>x</thinking>\n\n\n\nAnswer\n\n\n\nMore") \
        == "Answer\n\nMore"
    assert strip_tool_result_blocks("<tool_result name=\"a\">never closed") \
        == "<tool_result name=\"a\">never closed"
    assert strip_tool_result_content("[Tool results]\n<tool_result name=\"a\">x</tool_result>") == ""


def test_credentials_in_a_reply_are_redacted():
    reply = ("Connect with postgres://admin:hunter2@db.internal:5432/app and the key "
             "AKIAABCDEFGHIJKLMNOP.")
    assert sanitize_response(reply) == ("Connect with [REDACTED_DATABASE_URL] and the key "
                                         "[REDACTED_AWS_CREDENTIAL].")


def test_unknown_tool_json_reply_is_shown_not_swallowed():
    reply = "{\"name\":\"profile\",\"parameters\":{\"timezone\":\"UTC\"}}"
    assert sanitize_response(reply, ["shell"]) == reply


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(MIXED, st.lists(st.sampled_from(["shell", "file_write", "x", "Name"]), max_size=3))
def test_never_raises_and_never_empties_a_non_empty_reply(text, known):
    result = sanitize_response(text, known)
    assert isinstance(result, str)
    if text.strip(RUST_WS):
        assert result


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(MIXED)
def test_the_steps_raise_nothing_without_the_safety_net(text):
    from agents.runtime.sanitize import sanitize_channel_response, strip_think_tags_inline

    sanitize_channel_response(strip_tool_result_blocks(strip_think_tags_inline(text)), ["shell"])


@pytest.mark.parametrize("text", [
    repeat("<tool_call>{"),
    repeat("{"),
    "[" * 500_000 + "]" * 500_000,
    repeat('{"a":'),
    repeat("<tool_result>"),
    repeat("eyJa.eyJb."),
    repeat("postgres://a:b"),
    repeat('[{"name":"shell","arguments":{}}]\n'),
], ids=["tool_call+brace", "braces", "balanced_deep", "object_chain", "tool_result", "jwt_like",
        "db_url_like", "json_lines"])
def test_a_megabyte_of_hostile_input_sanitizes_without_error(text, caplog):
    """How fast: ``bench.hostile_input`` (every one of these inputs)."""
    assert isinstance(sanitize_response(text, ["shell"]), str)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # no swallowed exception


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<tool_result", "</tool_result>", "<think>", "</think>",
                                 "<thinking>", "</thinking>", ">", " x", "\n", "a"]),
                max_size=40).map("".join))
def test_block_removal_equals_the_original_lazy_regexes(text):
    # Matched by hand because Python's re would rescan to the end for every unclosed tag.
    assert _remove_tool_results(text) == re.sub(r"(?s)<tool_result[^>]*>.*?</tool_result>", "", text)
    for open_tag, close_tag in (("<think>", "</think>"), ("<thinking>", "</thinking>")):
        assert _remove_tag_blocks(text, open_tag, close_tag, open_has_attributes=False) == \
            re.sub(rf"(?s){open_tag}.*?{close_tag}", "", text)
