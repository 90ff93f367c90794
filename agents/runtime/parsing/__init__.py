"""Tool calls read from model text (ZeroClaw's ``parse_tool_calls``, runtime spec §2 and §17.15).

``parse_tool_calls(text)`` returns the text a user should see and the calls the model asked for.
It understands every format models are seen to emit when they are not using native tool calling:
OpenAI-style JSON, ``<tool_call>`` blocks (and the ``<toolcall>``, ``<tool-call>``,
``<tool_calls>``, ``<invoke>``, ``<minimax:tool_call>`` aliases, with mixed-up close tags or
none), ``<tools>`` wrappers around one invocation (a Hermes tool *declaration* is never run),
MiniMax ``<invoke name=..><parameter ..>`` markup, XML bodies, GLM shorthand (``shell>ls``,
``tool(k="v")``, ``tool k="v" />``, ``tool/param>value`` lines), ``tool_call`` / ``tool <name>``
code fences, Perl-style ``TOOL_CALL`` blocks and ``<FunctionCall>`` blocks.

Bare JSON inside prose is never a call: a model quoting an example must not run it.

The ZH additions of spec §17.15 are included (``<tools>`` / ``<tool_calls>`` wrappers with the
Hermes declaration guard, recovery of a ``file_write`` whose content has unescaped quotes); the
conformance test of ``parse_tool_calls_head.json`` records why for each vector.

Contracts:

* ``parse_tool_calls`` and the helpers here never raise. Python's ``re`` backtracks where Rust's
  ``regex`` does not, so every pattern that could go quadratic on hostile input is matched by
  hand with memoised ``find``\\s, and JSON values embedded in text are located by one memoised
  bracket scan (``_JsonScanner``) before ``json`` decodes them.
* JSON follows serde_json: no ``NaN``/``Infinity``, numbers must be finite, nesting deeper than
  127 levels is rejected.
* ``ToolCall.arguments`` is always a dict. Arguments that are JSON ``null`` or absent become
  ``{}``; arguments that are not an object (a list, a number, a string that is not JSON) also
  become ``{}`` and ``ToolCall.arguments_error`` says why, so the loop can tell the model instead
  of running the tool with nothing. ``parse_arguments_value`` itself keeps ZeroClaw's raw result
  (``null`` stays ``None``).

Deliberate differences from the original (none is covered by a vector):

* Names in JSON calls are used as written (ZeroClaw's later parser maps aliases there too, so
  ``web_search`` would become ``shell``; our tools are user-defined, so that would misroute).
* A GLM line with nothing before its ``/`` (``/usr/bin>x``) is not a call with an empty name.
* Text clean-up after ``<FunctionCall>`` / attribute-``<invoke>`` calls looks for the close tag
  after the open tag; the original could loop forever or duplicate text when a close tag came
  first. The clean-up is one left-to-right pass, so a marker that only forms once a block is cut
  out is not removed again.
* With more than 32 distinct GLM call lines in one response, each line is removed where it stands
  instead of every copy of its text (which would make the clean-up quadratic).

Where things are (the underscored modules are private; import from this package):

* ``_parser``: ``parse_tool_calls`` and the order in which the steps below are tried.
* ``_tag_loop``: ``<tool_call>`` blocks and their aliases, ``<tools>`` wrappers.
* ``_xml_bodies``, ``_glm``, ``_minimax``, ``_fences``, ``_perl_and_function_call``: one
  dialect each; ``_file_write_recovery``: the malformed ``file_write`` of spec §17.15.
* ``_calls``: ``ToolCall``, tool-name aliases and the JSON call shapes.
* ``_json_values``: JSON with serde_json semantics and the linear scanner for JSON in text.
* ``_text``: Rust string semantics and memoised searches; ``_think``: ``<think>`` blocks.
* ``_loop_helpers``: display text, the parse-issue note and native history for the loop.
"""

from __future__ import annotations

# Names outside ``__all__`` are re-exported (``as`` marks it) because they were reachable on the
# single module this package replaced: ``sanitize`` shares the text primitives and the JSON
# scanner, and the parser's tests pin the hand-written matchers against the regexes they
# replace. The underscored ones are private; new code should use only the names in ``__all__``.
from ._calls import (
    ToolCall,
    default_param_for_tool,
    map_tool_name_alias,
    parse_arguments_value,
    parse_tool_call_value,
    parse_tool_calls_from_json_value,
)
from ._fences import _MD_TOOL_CALL_CLOSE as _MD_TOOL_CALL_CLOSE
from ._fences import _MD_TOOL_CALL_OPEN as _MD_TOOL_CALL_OPEN
from ._fences import _fence_matches as _fence_matches
from ._glm import parse_glm_shortened_body, parse_glm_style_tool_calls
from ._json_values import _DECODER as _DECODER
from ._json_values import JSON_WS as JSON_WS
from ._json_values import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from ._json_values import MISSING as MISSING
from ._json_values import _JsonScanner as _JsonScanner
from ._json_values import _serde_accepts as _serde_accepts
from ._json_values import extract_json_values
from ._json_values import json_loads as json_loads
from ._loop_helpers import PARSE_ISSUE as PARSE_ISSUE
from ._loop_helpers import (
    build_native_assistant_history,
    build_native_assistant_history_from_parsed_calls,
    detect_tool_call_parse_issue,
    resolve_display_text,
)
from ._minimax import _named_blocks_ci as _named_blocks_ci
from ._parser import _parse_raw as _parse_raw
from ._parser import parse_tool_calls
from ._perl_and_function_call import _parse_perl_style_tool_calls as _parse_perl_style_tool_calls
from ._tag_loop import _ParseState as _ParseState
from ._tag_loop import _strip_leading_close_tags as _strip_leading_close_tags
from ._text import RUST_WS as RUST_WS
from ._text import _ascii_lower as _ascii_lower
from ._text import _literal_seeker as _literal_seeker
from ._text import _regex_seeker as _regex_seeker
from ._text import _rust_lines as _rust_lines
from ._text import _trim as _trim
from ._think import strip_think_tags

__all__ = [
    "ToolCall",
    "build_native_assistant_history",
    "build_native_assistant_history_from_parsed_calls",
    "default_param_for_tool",
    "detect_tool_call_parse_issue",
    "extract_json_values",
    "map_tool_name_alias",
    "parse_arguments_value",
    "parse_glm_shortened_body",
    "parse_glm_style_tool_calls",
    "parse_tool_call_value",
    "parse_tool_calls",
    "parse_tool_calls_from_json_value",
    "resolve_display_text",
    "strip_think_tags",
]
