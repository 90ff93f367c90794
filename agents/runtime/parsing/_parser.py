"""``parse_tool_calls``: the order in which the dialects are tried, and what is left as text.

1. the whole response as one JSON call; 2. a malformed ``file_write``; then MiniMax markup
(unless a ``<tools>`` wrapper is present); 3. the tag loop; 4-5. the markdown fences; 6-9.
attribute ``<invoke>``, Perl, ``<FunctionCall>`` and GLM lines on what the tag loop left.
Steps 4-9 run only while no call has been found.
"""

from __future__ import annotations

import logging

from ._calls import ToolCall, _calls_from_json_value, _finish, _Parsed
from ._fences import _markdown_tool_call_fences, _markdown_tool_name_fences
from ._file_write_recovery import _parse_malformed_file_write_call
from ._glm import _parse_glm_lines, _remove_raw_lines
from ._json_values import _NO_VALUE, _json_object_get, json_loads
from ._minimax import _parse_minimax_invoke_calls, _parse_xml_attribute_tool_calls
from ._perl_and_function_call import _parse_function_call_tool_calls, _parse_perl_style_tool_calls
from ._tag_loop import _ParseState
from ._text import _remove_blocks, _trim
from ._think import strip_think_tags

# Named after the package, as before the split, so log filters and formats see the same name.
logger = logging.getLogger(__package__)


def _fallback_steps(state: _ParseState, remaining: str) -> str:
    """Steps 6-9 on the unparsed remainder; returns what is left of it as text."""
    calls = _parse_xml_attribute_tool_calls(remaining)
    if calls:
        state.calls.extend(calls)
        # One block per call, as the original removes one per call.
        state.push_text(_remove_blocks(remaining, "<minimax:toolcall>", "</minimax:toolcall>",
                                       limit=len(calls)))
        return ""
    calls = _parse_perl_style_tool_calls(remaining)
    if calls:
        state.calls.extend(calls)
        # "/TOOL_CALL" contains "TOOL_CALL": the original removes from the first "TOOL_CALL"
        # through the first "/TOOL_CALL", which may be the same marker.
        state.push_text(_remove_blocks(remaining, "TOOL_CALL", "/TOOL_CALL", close_from=-1))
        return ""
    calls = _parse_function_call_tool_calls(remaining)
    if calls:
        state.calls.extend(calls)
        state.push_text(_remove_blocks(remaining, "<FunctionCall>", "</FunctionCall>"))
        return ""
    glm = _parse_glm_lines(remaining)
    if glm:
        state.calls.extend(_Parsed(name, args) for name, args, _raw in glm)
        state.push_text(_remove_raw_lines(remaining, [raw for _n, _a, raw in glm]))
        return ""
    return remaining


def _parse_raw(text: str) -> tuple[str, list[_Parsed]]:
    response = strip_think_tags(text)

    whole = json_loads(response)
    if whole is not _NO_VALUE:
        calls = _calls_from_json_value(whole)
        if calls:
            content = _json_object_get(whole, "content")
            return (_trim(content) if isinstance(content, str) else ""), calls

    recovered = _parse_malformed_file_write_call(response)
    if recovered is not None:
        return "", [recovered]

    # MiniMax markup anywhere would otherwise run legacy calls nested inside a refused
    # <tools> wrapper before the wrapper is looked at.
    if "<tools>" not in response:
        minimax = _parse_minimax_invoke_calls(response)
        if minimax is not None:
            return minimax

    state = _ParseState(response)
    remaining_start = state.tag_loop()
    remaining = response[remaining_start:]

    if not state.calls and (_markdown_tool_call_fences(state) or _markdown_tool_name_fences(state)):
        remaining = ""
    if not state.calls:
        remaining = _fallback_steps(state, remaining)

    state.push_text(remaining)
    state.log_malformed()
    return "\n".join(state.text_parts), state.calls


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """Split a model response into the text to show and the tool calls it asks for.

    Never raises: input that cannot be understood stays text.
    """
    try:
        visible, calls = _parse_raw(text)
    except Exception:  # pragma: no cover - a parser bug must not break the turn
        logger.exception("tool-call parsing failed; treating the response as text")
        try:
            return strip_think_tags(text), []
        except Exception:
            return "", []
    return visible, [_finish(c) for c in calls]
