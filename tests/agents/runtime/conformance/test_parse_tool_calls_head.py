"""``parse_tool_calls_head.json``: parser behaviour added after the Z snapshot (ZH, spec §17.15).

Each vector's ``expected`` is the ZH output; 25 of them carry a ``note`` with the Z output. We
chose per vector and chose ZH every time; ``CHOICES`` records why, so a later change of mind is
a one-line edit (an entry whose value starts with ``"Z:"`` is checked against the Z output).
"""

from __future__ import annotations

import json

import pytest

from agents.runtime.parsing import parse_tool_calls
from tests.agents.runtime.conformance import approx_equal, vectors
from tests.agents.runtime.conformance.test_parse_tool_calls import as_vector_output

_RUN_WRAPPED = ("ZH: Qwen2.5-Coder and other Hermes-family models wrap a real invocation in "
                "<tools>; running it is what the user asked for, Z showed raw markup instead")
_INERT = ("ZH: a <tools> body that is not exactly one invocation is never run; ZH also drops "
          "the wrapper tag from the text, which reads better than Z's raw '<tools>'")
_DECLARATION = ("ZH: a Hermes tool *declaration* (array, description, parameters schema) is "
                "shown without its wrapper tags and never run")
_FILE_WRITE = ("ZH: a file_write whose HTML content has unescaped quotes is recovered (only "
               "when content is the last field), where Z silently lost the call")
_NO_GLM = ("ZH: shorthand like 'shell>rm -rf' inside <tools> is never run (Z showed it as text, "
           "ZH shows it without the wrapper)")

CHOICES = {
    "zc.parse.head.tools_bare_canonical_invocation_still_parses": _RUN_WRAPPED,
    "zc.parse.head.tools_whitespace_padded_invocation_still_parses": _RUN_WRAPPED,
    "zc.parse.head.tools_unclosed_bare_canonical_invocation_still_parses": _RUN_WRAPPED,
    "zc.parse.head.parse_tool_calls_handles_tools_tag_alias": _RUN_WRAPPED,
    "zc.parse.head.parse_tool_calls_still_accepts_canonical_tools_invocation": _RUN_WRAPPED,
    "zc.parse.head.tools_literal_close_tag_inside_arguments_is_preserved": (
        _RUN_WRAPPED + "; a close tag quoted inside the arguments does not cut the call"),
    "zc.parse.head.tools_quoted_foreign_close_inside_arguments_is_preserved": (
        _RUN_WRAPPED + "; the quoted close tag stays part of the content"),
    "zc.parse.head.tools_quoted_close_inside_unclosed_arguments_is_preserved": (
        _RUN_WRAPPED + "; also when the wrapper is never closed"),
    "zc.parse.head.parse_tool_calls_handles_plural_tool_calls_wrapper": (
        "ZH: <tool_calls> is a common plural spelling of <tool_call>; Z ignored the call"),
    "zc.parse.head.tools_unclosed_prose_prefixed_invocation_stays_inert": _INERT,
    "zc.parse.head.tools_unclosed_trailing_suffix_stays_inert": _INERT,
    "zc.parse.head.tools_unclosed_multiple_values_stays_inert": _INERT,
    "zc.parse.head.parse_tool_calls_rejects_tools_wrapper_with_args_key": (
        _INERT + "; 'args' is not an arguments key, so running it would drop the arguments"),
    "zc.parse.head.tools_wrapping_legacy_invoke_does_not_bypass_the_guard": (
        "ZH: Z ran `rm -rf /tmp/x` from <invoke> markup nested inside a <tools> block; ZH keeps "
        "it as text. Safety wins"),
    "zc.parse.head.parse_tool_calls_rejects_tools_declaration_block": _DECLARATION,
    "zc.parse.head.parse_tool_calls_rejects_tools_block_discussed_in_prose": _DECLARATION,
    "zc.parse.head.parse_tool_calls_rejects_echoed_system_prompt_tools_block": _DECLARATION,
    "zc.parse.head.parse_tool_calls_rejects_tools_declaration_closed_by_foreign_alias": _DECLARATION,
    "zc.parse.head.parse_tool_calls_rejects_unclosed_tools_declaration": _DECLARATION,
    "zc.parse.head.tools_wrapper_does_not_reach_glm_shortened_body_on_matching_close": _NO_GLM,
    "zc.parse.head.tools_wrapper_does_not_reach_glm_shortened_body_on_foreign_close": _NO_GLM,
    "zc.parse.head.tools_wrapper_does_not_reach_glm_shortened_body_when_unclosed": _NO_GLM,
    "zc.parse.head.parse_tool_calls_recovers_malformed_file_write_content_quotes": _FILE_WRITE,
    "zc.parse.head.parse_tool_calls_recovers_malformed_file_write_tool_name_fence": _FILE_WRITE,
    "zc.parse.head.parse_tool_calls_recovers_malformed_file_write_non_ascii_safely": _FILE_WRITE,
}


def z_output(note: str) -> dict:
    marker = "returns "
    start = note.index(marker) + len(marker)
    value, _end = json.JSONDecoder().raw_decode(note, start)
    return value


@pytest.mark.parametrize("vector", vectors("parse_tool_calls_head.json", "parse_tool_calls"))
def test_parse_tool_calls_head(vector):
    text, calls = parse_tool_calls(vector["input"])
    choice = CHOICES.get(vector["id"], "")
    expected = z_output(vector["note"]) if choice.startswith("Z:") else vector["expected"]
    assert approx_equal(as_vector_output(text, calls), expected)


def test_every_vector_with_a_z_output_has_a_recorded_choice():
    rows = [v.values[0] for v in vectors("parse_tool_calls_head.json")]
    if rows == [None]:
        pytest.skip("vectors absent")
    with_z = {v["id"] for v in rows if "returns " in v.get("note", "")}
    assert with_z == set(CHOICES)
