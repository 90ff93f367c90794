"""What two runs said differently: how two payloads of aligned steps differ, in plain words
(``payload_difference``: a model request's request or answer, a tool call's arguments or
result), and the word diff of their answers (``answer_diff``). Pure Python, like the comparison
that asks (``compare``).

Payloads are compared as JSON where they are JSON (key order does not matter), a model
request's without what changes between identical runs: request and call ids, the usage the
provider reported, date and time stamps. The words name the first thing that differs (the
model, the system prompt, the tools, a message by its number and role, an argument) and quote
both sides cut around their first difference."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

# The kinds of step whose payloads say the most (the others have an output at most).
LLM = "llm_request"
TOOL = "tool_call"
EXCERPT_CHARS = 60
# Characters of an answer that go into its text diff.
ANSWER_DIFF_CHARS = 20_000
# Keys that differ between two identical runs of the same request: ids given by the provider or
# the runtime, and the usage it reported (a cache hit changes it, not the content).
VOLATILE_KEYS = frozenset({"id", "tool_use_id", "tool_call_id", "usage", "created", "system_fingerprint"})
# A date and time stamp, as the runtime puts one in the system prompt and before user messages.
STAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2}| [A-Z]{2,5})?"
                   r"(?: \([A-Z][a-z]+day\))?")


def normalised(kind: str, content: str) -> Any:
    """A payload as compared: JSON parsed (key order does not matter); a model request's without
    ids, usage and date/time stamps. Text as it is."""
    if kind in ("request", "response", "message", "arguments"):
        try:
            data = json.loads(content)
        except ValueError:
            return content
        return _strip_volatile(data) if kind != "arguments" else data
    return content


def _strip_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_volatile(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_strip_volatile(v) for v in value]
    if isinstance(value, str):
        return STAMP.sub("<time>", value)
    return value


def payload_difference(step_kind: str, kind: str, content_a: str, content_b: str) -> str | None:
    """How two payloads of aligned steps differ, in plain words; None when they do not."""
    if content_a == content_b:
        return None
    left, right = normalised(kind, content_a), normalised(kind, content_b)
    if kind == "request":
        left, right = comparable_requests(left, right)
    if left == right:
        return None
    if kind == "arguments":
        return "arguments differ: " + _dict_difference(left, right)
    if kind == "output":
        return f"{'results' if step_kind == TOOL else 'outputs'} differ: {_text_pair(str(left), str(right))}"
    if kind == "request":
        return "the request differs: " + _request_difference(left, right)
    return "the answer differs: " + _answer_difference(left, right)


def comparable_requests(left: Any, right: Any) -> tuple[Any, Any]:
    """Two recorded requests cut to what both record. A request's record holds only the
    messages it added after the previous request (from ``message_offset``) and the tools'
    definitions only when it starts over; a request sent again as the first of a fork records
    them all. So the messages are compared over the positions both hold (and any beyond the
    shorter end), the definitions only when both have them."""
    if not (isinstance(left, dict) and isinstance(right, dict)):
        return left, right
    offset_a, offset_b = left.get("message_offset") or 0, right.get("message_offset") or 0
    if offset_a == offset_b and ("tool_specs" in left) == ("tool_specs" in right):
        return left, right
    start = max(offset_a, offset_b)
    left, right = dict(left), dict(right)
    for side, offset in ((left, offset_a), (right, offset_b)):
        side["messages"] = list(side.get("messages") or [])[start - offset:]
        side["message_offset"] = start
    if ("tool_specs" in left) != ("tool_specs" in right):
        left.pop("tool_specs", None)
        right.pop("tool_specs", None)
    return left, right


def _dict_difference(left: Any, right: Any) -> str:
    if not (isinstance(left, dict) and isinstance(right, dict)):
        return _text_pair(_compact(left), _compact(right))
    parts = []
    for key in [*left, *(k for k in right if k not in left)]:
        if key not in right:
            parts.append(f"{key} only in A ({quote(_compact(left[key]))})")
        elif key not in left:
            parts.append(f"{key} only in B ({quote(_compact(right[key]))})")
        elif left[key] != right[key]:
            parts.append(f"{key} {_text_pair(_compact(left[key]), _compact(right[key]))}")
        if len(parts) == 3:
            break
    return "; ".join(parts) or "their order differs"


def _request_difference(left: Any, right: Any) -> str:
    if not (isinstance(left, dict) and isinstance(right, dict)):
        return _text_pair(_compact(left), _compact(right))
    if left.get("model") != right.get("model"):
        return f"model {_text_pair(str(left.get('model')), str(right.get('model')))}"
    if left.get("system") != right.get("system"):
        return f"the system prompt: {_text_pair(_blocks_text(left.get('system')), _blocks_text(right.get('system')))}"
    if left.get("tools") != right.get("tools"):
        return f"the tools offered: {_text_pair(_compact(left.get('tools')), _compact(right.get('tools')))}"
    if left.get("tool_specs") != right.get("tool_specs"):
        return "the tools' descriptions or parameters"
    ma, mb = left.get("messages") or [], right.get("messages") or []
    if ma != mb:
        offset = left.get("message_offset") or 0
        for k in range(max(len(ma), len(mb))):
            ea = ma[k] if k < len(ma) else None
            eb = mb[k] if k < len(mb) else None
            if ea == eb:
                continue
            number = offset + k + 1
            if ea is None or eb is None:
                present = ea if ea is not None else eb
                side = "A" if ea is not None else "B"
                return f"message {number} ({_role(present)}) is only in run {side}: {quote(_message_text(present))}"
            role = _role(ea) if _role(ea) == _role(eb) else f"{_role(ea)} vs {_role(eb)}"
            return f"message {number} ({role}): {_text_pair(_message_text(ea), _message_text(eb))}"
    keys = [k for k in [*left, *right] if left.get(k) != right.get(k)]
    if keys:
        key = keys[0]
        return f"{key} {_text_pair(_compact(left.get(key)), _compact(right.get(key)))}"
    return "in its details"


def _answer_difference(left: Any, right: Any) -> str:
    la, lb = _message_of(left), _message_of(right)
    ca, cb = _calls(la), _calls(lb)
    if ca != cb:
        return f"the model called {_calls_text(ca)} in run A, {_calls_text(cb)} in run B"
    ta, tb = _message_text(la), _message_text(lb)
    if ta != tb:
        return _text_pair(ta, tb)
    if isinstance(left, dict) and isinstance(right, dict) and left.get("stop_reason") != right.get("stop_reason"):
        return f"stop reason {_text_pair(str(left.get('stop_reason')), str(right.get('stop_reason')))}"
    return "in its details"


def _message_of(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get("message"), dict):
        return value["message"]
    return value


def _calls(message: Any) -> list[tuple[str, Any]]:
    blocks = message.get("blocks") if isinstance(message, dict) else None
    return [(b.get("name", ""), b.get("input")) for b in blocks or []
            if isinstance(b, dict) and b.get("type") == "tool_use"]


def _calls_text(calls: list[tuple[str, Any]]) -> str:
    if not calls:
        return "no tool"
    parts = []
    for name, args in calls[:3]:
        if isinstance(args, dict):
            inner = ", ".join(f"{k}={quote(_compact(v))}" for k, v in list(args.items())[:3])
        else:
            inner = _compact(args)
        parts.append(f"{name}({excerpt(inner)})")
    return ", ".join(parts) + (" …" if len(calls) > 3 else "")


def _role(message: Any) -> str:
    return str(message.get("role", "?")) if isinstance(message, dict) else "?"


def _message_text(message: Any) -> str:
    if isinstance(message, dict):
        if isinstance(message.get("blocks"), list):
            return _blocks_text(message["blocks"])
        if isinstance(message.get("content"), str):
            return message["content"]
    return _compact(message)


def _blocks_text(blocks: Any) -> str:
    if not isinstance(blocks, list):
        return _compact(blocks)
    parts = []
    for block in blocks:
        if not isinstance(block, dict):
            parts.append(_compact(block))
        elif "text" in block:
            parts.append(str(block["text"]))
        elif block.get("type") == "tool_use":
            parts.append(_calls_text([(block.get("name", ""), block.get("input"))]))
        elif block.get("type") == "tool_result":
            parts.append(f"result of {block.get('name', '?')}: {block.get('output', '')}")
        else:
            parts.append(_compact(block))
    return " ".join(parts)


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _text_pair(left: str, right: str) -> str:
    """Two texts that differ, cut around their first difference: "'…6*7' vs '…6*8'"."""
    at = 0
    limit = min(len(left), len(right))
    while at < limit and left[at] == right[at]:
        at += 1
    start = max(at - 20, 0)
    return f"{quote(left[start:], cut=start > 0)} vs {quote(right[start:], cut=start > 0)}"


def quote(text: str, *, cut: bool = False) -> str:
    return f"'{'…' if cut else ''}{excerpt(text)}'"


def excerpt(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def answer_diff(a: str, b: str) -> list[tuple[str, str]]:
    """The answers' word diff as ``(op, text)`` with op equal, delete or insert (text unescaped:
    the page escapes it)."""
    wa = re.split(r"(\s+)", a[:ANSWER_DIFF_CHARS])
    wb = re.split(r"(\s+)", b[:ANSWER_DIFF_CHARS])
    out: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes():
        if tag == "equal":
            out.append(("equal", "".join(wa[i1:i2])))
            continue
        if i2 > i1:
            out.append(("delete", "".join(wa[i1:i2])))
        if j2 > j1:
            out.append(("insert", "".join(wb[j1:j2])))
    return out
