"""What a chat reply shows (runtime spec §12: ZeroClaw's channel response sanitization).

``sanitize_response(text, known_tools)`` is the reply a user sees: reasoning (``<think>``),
tool-result blocks, ``[Used tools: …]`` prefixes, tool-call tags, tool-call JSON lines naming a
known tool, and leading "Let me check…" narration are removed, and credentials are redacted.
When that leaves nothing of a non-empty reply, the user gets ``MALFORMED_REPLY`` instead of an
empty message.

The individual steps are public because the conformance vectors check each of them on its own.
None of them raises, and all are linear in the input (Python's ``re`` backtracks, so the lazy
``.*?`` block patterns of the original are matched with memoised ``find``\\s).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from .parsing import (
    RUST_WS,
    _ascii_lower,
    _JsonScanner,
    _literal_seeker,
    _rust_lines,
    _strip_leading_close_tags,
    _trim,
)
from .parsing import strip_think_tags as _strip_think_tags
from .scrub import redact_leaks, scrub_secrets

logger = logging.getLogger(__name__)

__all__ = [
    "MALFORMED_REPLY",
    "sanitize_channel_response",
    "bidi_visible",
    "sanitize_response",
    "strip_isolated_tool_json_artifacts",
    "strip_think_tags_inline",
    "strip_tool_call_tags",
    "strip_tool_narration",
    "strip_tool_result_blocks",
    "strip_tool_result_content",
    "strip_tool_summary_prefix",
]

MALFORMED_REPLY = ("I encountered malformed tool-call output and could not produce a safe reply. "
                   "Please try again.")

_EXCESS_NEWLINES = re.compile(r"\n{3,}")


def _collapse_blank_lines(text: str) -> str:
    # Same result as replacing "\n\n\n" with "\n\n" until none is left.
    return _EXCESS_NEWLINES.sub("\n\n", text)


# --------------------------------------------------------------------------------------------
# Block removal
# --------------------------------------------------------------------------------------------


def _remove_tag_blocks(text: str, open_prefix: str, close_tag: str, *,
                       open_has_attributes: bool) -> str:
    """Remove ``(?s)<open>.*?</close>`` matches (``<open[^>]*>`` when the open tag may carry
    attributes), left to right."""
    gt = _literal_seeker(text, ">")
    close = _literal_seeker(text, close_tag)
    out = []
    pos = 0
    while True:
        start = text.find(open_prefix, pos)
        if start < 0:
            break
        body = start + len(open_prefix)
        if open_has_attributes:
            tag_end = gt(body)
            if tag_end < 0:
                break
            body = tag_end + 1
        end = close(body)
        if end < 0:
            break
        out.append(text[pos:start])
        pos = end + len(close_tag)
    out.append(text[pos:])
    return "".join(out)


def _remove_tool_results(text: str) -> str:
    return _remove_tag_blocks(text, "<tool_result", "</tool_result>", open_has_attributes=True)


_TOOL_RESULTS_HEADER = re.compile(r"(?m)^\[Tool results\]\s*\n?")


def strip_tool_result_blocks(text: str) -> str:
    """Remove ``<tool_result …>…</tool_result>``, ``<thinking>…</thinking>``,
    ``<think>…</think>`` and ``[Tool results]`` header lines; collapse blank lines."""
    result = _remove_tool_results(text)
    result = _remove_tag_blocks(result, "<thinking>", "</thinking>", open_has_attributes=False)
    result = _remove_tag_blocks(result, "<think>", "</think>", open_has_attributes=False)
    if "[Tool results]" in result:
        result = _TOOL_RESULTS_HEADER.sub("", result)
    return _trim(_collapse_blank_lines(_trim(result)))


def strip_tool_result_content(text: str) -> str:
    """A history entry without its ``<tool_result>`` blocks; ``""`` when only the
    ``[Tool results]`` header (or nothing) is left."""
    cleaned = _trim(_remove_tool_results(text))
    return "" if cleaned in ("", "[Tool results]") else cleaned


def strip_tool_summary_prefix(text: str) -> str:
    """Drop a leading ``[Used tools: …]`` summary and the newlines after it."""
    if text.startswith("[Used tools:"):
        bracket = text.find("]", len("[Used tools:"))
        if bracket >= 0:
            return text[bracket + 1:].lstrip("\n")
    return text


def strip_think_tags_inline(text: str) -> str:
    """For streamed drafts: remove ``<think>`` blocks (an unclosed one drops the rest); trimmed."""
    return _strip_think_tags(text)


# --------------------------------------------------------------------------------------------
# Tool-call tags
# --------------------------------------------------------------------------------------------

_STRIP_OPEN_TAGS = ("<function_calls>", "<function_call>", "<tool_call>", "<toolcall>",
                    "<tool-call>", "<tool>", "<invoke>")
_STRIP_OPEN_RE = re.compile("|".join(map(re.escape, _STRIP_OPEN_TAGS)))


def strip_tool_call_tags(text: str) -> str:
    """Remove ``<tool_call>``-style blocks (and ``<function_calls>``, ``<tool>``, ``<invoke>``):
    a block ends at its close tag, or after the JSON value that follows an unclosed tag; an
    unclosed tag with no JSON keeps the rest as it is. Surrounding text is kept as written."""
    scanner = _JsonScanner(text)
    closers = {tag: _literal_seeker(text, "</" + tag[1:]) for tag in _STRIP_OPEN_TAGS}
    kept = []
    pos = 0
    while True:
        m = _STRIP_OPEN_RE.search(text, pos)
        if m is None:
            kept.append(text[pos:])
            break
        kept.append(text[pos:m.start()])
        close_tag = "</" + m.group()[1:]
        close = closers[m.group()](m.end())
        if close >= 0:
            pos = close + len(close_tag)
            continue
        lead = m.end()
        while lead < len(text) and text[lead] in RUST_WS:
            lead += 1
        found = scanner.first_value_from(lead)
        if found is not None:
            pos = _strip_leading_close_tags(text, found[1])
            continue
        kept.append(text[m.start():])
        break
    return _trim(_collapse_blank_lines("".join(kept)))


# --------------------------------------------------------------------------------------------
# Tool JSON on its own line
# --------------------------------------------------------------------------------------------


def _payload_name_and_args(obj: dict[str, object]) -> tuple[object, bool]:
    function = obj.get("function")
    if isinstance(function, dict):
        name = function.get("name")
        if not isinstance(name, str):
            name = obj.get("name")
        has_args = any(k in function or k in obj for k in ("arguments", "parameters"))
        return name, has_args
    return obj.get("name"), "arguments" in obj or "parameters" in obj


def _is_tool_call_payload(value: object, known: frozenset[str]) -> bool:
    if not isinstance(value, dict):
        return False
    name, has_args = _payload_name_and_args(value)
    if not isinstance(name, str) or not _trim(name):
        return False
    return has_args and _ascii_lower(_trim(name)) in known


def _is_tool_result_payload(obj: dict[str, object], saw_call: bool) -> bool:
    allowed = {"result", "id", "tool_call_id", "name", "tool"}
    return saw_call and "result" in obj and all(key in allowed for key in obj)


def _replacement_for(value: object, known: frozenset[str],
                     saw_call: bool) -> tuple[str, bool] | None:
    """``(text to put instead, marks a tool call)`` for a removable artifact, else None."""
    if _is_tool_call_payload(value, known):
        return "", True
    if isinstance(value, list):
        if value and all(_is_tool_call_payload(item, known) for item in value):
            return "", True
        return None
    if not isinstance(value, dict):
        return None
    calls = value.get("tool_calls")
    if isinstance(calls, list) and calls and all(_is_tool_call_payload(c, known) for c in calls):
        content = value.get("content")
        return (_trim(content) if isinstance(content, str) else ""), True
    if _is_tool_result_payload(value, saw_call):
        return "", False
    return None


_LINE_START_BRACKET = re.compile(rf"(?m)^[{re.escape(RUST_WS.replace(chr(10), ''))}]*+[\[{{]")


def _rest_of_line_blank(text: str, end: int) -> bool:
    line_end = text.find("\n", end)
    rest = text[end:] if line_end < 0 else text[end:line_end]
    return not _trim(rest)


def strip_isolated_tool_json_artifacts(message: str, known_tool_names: Iterable[str]) -> str:
    """Remove JSON values standing alone on their lines that are tool calls naming a known tool
    (or arrays of them, or ``{"tool_calls": [...], "content"}`` which leaves its content), and,
    after such a call, tool-result objects (``{"result": …}`` with only id/name keys). Other JSON,
    and JSON inside a sentence, stays."""
    known = frozenset(_ascii_lower(name) for name in known_tool_names)
    scanner = _JsonScanner(message)
    out = []
    cursor = 0
    saw_call = False
    # Only a bracket that starts its line can be isolated; finding those directly keeps this
    # linear where the original tried every bracket.
    for m in _LINE_START_BRACKET.finditer(message):
        start = m.end() - 1
        if start < cursor:
            continue
        found = scanner.value_at(start)
        if found is None or not _rest_of_line_blank(message, found[1]):
            continue
        replacement = _replacement_for(found[0], known, saw_call)
        if replacement is None:
            continue
        text, marks_call = replacement
        saw_call = saw_call or marks_call
        out.append(message[cursor:start])
        out.append(_trim(text))
        cursor = found[1]
    out.append(message[cursor:])
    return _trim(_collapse_blank_lines("".join(out).replace("\r\n", "\n")))


# --------------------------------------------------------------------------------------------
# Narration and the whole pipeline
# --------------------------------------------------------------------------------------------

NARRATION_PREFIXES = ("let me ", "i'll ", "i will ", "i am going to ", "i'm going to ",
                      "searching ", "looking up ", "fetching ", "checking ", "using the ",
                      "using my ", "one moment", "hold on", "just a moment", "give me a moment",
                      "allow me to ")


def strip_tool_narration(message: str) -> str:
    """Drop leading lines that announce tool use ("Let me check…", "One moment"); if that would
    leave nothing, the message is returned as it was."""
    lines = _rust_lines(message)
    for index, line in enumerate(lines):
        trimmed = _trim(line)
        if trimmed and not trimmed.lower().startswith(NARRATION_PREFIXES):
            kept = _trim("\n".join(lines[index:]))
            break
    else:
        kept = ""
    if not kept and _trim(message):
        return message
    return kept


def sanitize_channel_response(response: str, known_tools: Iterable[str] = ()) -> str:
    """ZeroClaw's ``sanitize_channel_response``: summary prefix, tool-call tags, isolated tool
    JSON and leading narration removed, then credentials redacted (``scrub_secrets``)."""
    text = strip_tool_summary_prefix(_trim(response))
    text = strip_tool_call_tags(text)
    text = strip_isolated_tool_json_artifacts(text, known_tools)
    text = strip_tool_narration(text)
    return scrub_secrets(redact_leaks(text))


# Bidirectional embeddings, overrides and isolates: in a tool's output or an answer they reorder
# what is shown ("safe‮txt.exe" reads as "safeexe.txt"). They are shown as what they are.
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


def bidi_visible(text: str) -> str:
    """``text`` with each bidirectional control character written out (``[U+202E]``), so it
    cannot reorder what is displayed around it."""
    if not text or not _BIDI_CONTROLS.search(text):
        return text
    return _BIDI_CONTROLS.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def sanitize_response(text: str, known_tools: Iterable[str] = ()) -> str:
    """The reply a user sees for a model's final text. Never raises; never empty for a
    non-empty reply (``MALFORMED_REPLY`` instead)."""
    try:
        cleaned = strip_tool_result_blocks(strip_think_tags_inline(text))
        result = sanitize_channel_response(cleaned, known_tools)
    except Exception:  # pragma: no cover - a sanitizer bug must not leak raw tool output
        logger.exception("sanitizing a reply failed; sending the malformed-output message")
        return MALFORMED_REPLY if isinstance(text, str) and _trim(text) else ""
    if not _trim(result) and _trim(text):
        return MALFORMED_REPLY
    return bidi_visible(result)
