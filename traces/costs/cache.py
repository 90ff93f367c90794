"""Why a model request did or did not read from the provider's prompt cache.

Providers cache the start of a request: the tool definitions, then the system blocks, then the
messages, for one model. A request can reuse what it shares, from the start, with an earlier
request; the first thing that differs ends the reusable prefix. ``explain`` compares a request
with the one before it (the previous request of the turn, or the previous turn's last request),
names that first change and prices what it cost.

Money lost is counted on the tokens the request could have read, had nothing changed: the
previous request's prompt (at most this one's), less what was read from the cache, times the
difference between the input price and the cache-read price of the step's price. Nothing is
lost below the provider's minimum (the step records it; ``CACHE_MIN_TOKENS``, Anthropic's and
OpenAI's, for steps that do not): shorter prompts are not cached; nor when a request read all
but less than a block (``CACHE_BLOCK_TOKENS``) of what it could. A price without a
cache-read rate bills cached tokens as input, so it loses nothing either.

The reusable prefix is an estimate in tokens: its share of the request's characters (text as
the model reads it, not the stored JSON) times the prompt's tokens, and never less than what
the provider reported reading, which proves that much was reused.

Pure: it takes requests as ``traces.record.request_history.full_requests`` rebuilds them and the
step's numbers; reading them is ``traces.costs.cache_selectors``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from os.path import commonprefix
from typing import Any

CACHE_MIN_TOKENS = 1024
# Providers read their cache in blocks (OpenAI in steps of 128 tokens; the demo by whole message
# blocks): a request that read all but less than a block of what it could is a hit.
CACHE_BLOCK_TOKENS = 128
EXCERPT_CHARS = 60
MILLION = Decimal(1_000_000)
DATE_BLOCK = "## Current Date & Time"
TOOL_BLOCKS = ("## Tool Use Protocol", "## Tools")


@dataclass(frozen=True)
class Change:
    """The first region of the request that differs from the previous one."""

    region: str  # "model", "tools", "system", "messages"
    label: str  # what changed, as a phrase: "the agent's system prompt (system block 1)"
    detail: str = ""  # how, in one sentence
    index: int | None = None  # the system block or message, from 1
    role: str = ""  # of a changed message
    before: str = ""  # around the first difference, before and now
    after: str = ""


@dataclass(frozen=True)
class CacheExplanation:
    previous: str  # "turn": the previous request of the turn; "conversation": the previous turn's last
    change: Change | None
    prefix_share: float  # the part of this request before the first change (an estimate)
    prefix_tokens: int
    prompt_tokens: int
    previous_tokens: int
    read_tokens: int
    lost_tokens: int
    lost_usd: Decimal
    min_tokens: int = CACHE_MIN_TOKENS  # the provider's shortest cached prompt

    @property
    def too_short(self) -> bool:
        """Whether nothing could be read because a prompt was under the provider's minimum."""
        return min(self.previous_tokens, self.prompt_tokens) < self.min_tokens and not self.read_tokens

    @property
    def verdict(self) -> str:
        """``first``: nothing before it to reuse; ``hit``: it read what it could; ``changed``:
        a change cut the reusable prefix; ``missed``: nothing changed but the cache was not read
        (expired, evicted, or the provider does not cache)."""
        if not self.previous:
            return "first"
        if self.change is not None:
            return "changed"
        return "missed" if self.lost_tokens else "hit"

    @property
    def read_share(self) -> float | None:
        return self.read_tokens / self.prompt_tokens if self.prompt_tokens else None


def lost_tokens(*, previous_tokens: int, prompt_tokens: int, read_tokens: int,
                min_tokens: int = CACHE_MIN_TOKENS) -> int:
    """Tokens that could have been read from the cache but were billed as input or cache write
    (none below ``min_tokens``, the provider's shortest cached prompt, unless it read some)."""
    could = min(previous_tokens, prompt_tokens)
    if could < min_tokens and not read_tokens:
        return 0
    if read_tokens and could - read_tokens < CACHE_BLOCK_TOKENS:
        return 0
    return max(could - read_tokens, 0)


def lost_usd(tokens: int, *, input_per_mtok: Decimal | None,
             cache_read_per_mtok: Decimal | None) -> Decimal:
    if not tokens or input_per_mtok is None:
        return Decimal(0)
    read = input_per_mtok if cache_read_per_mtok is None else cache_read_per_mtok
    return max(Decimal(tokens) * (input_per_mtok - read) / MILLION, Decimal(0))


def explain(previous: dict[str, Any] | None, current: dict[str, Any], *, previous_kind: str,
            prompt_tokens: int, previous_tokens: int, read_tokens: int,
            input_per_mtok: Decimal | None = None,
            cache_read_per_mtok: Decimal | None = None,
            min_tokens: int = CACHE_MIN_TOKENS) -> CacheExplanation:
    """``previous`` and ``current`` are whole requests (messages and tool definitions
    included); the numbers are the steps' own: prompt tokens (input + cache write + cache
    read) of each, this step's cache reads, and the provider's shortest cached prompt."""
    total = _request_chars(current)
    if previous is None:
        change, prefix = None, 0
        previous_kind = ""
    else:
        change, prefix = first_change(previous, current)
    share = prefix / total if total else 0.0
    lost = lost_tokens(previous_tokens=previous_tokens, prompt_tokens=prompt_tokens,
                       read_tokens=read_tokens, min_tokens=min_tokens) if previous is not None else 0
    prefix_tokens = min(max(round(prompt_tokens * share), read_tokens), prompt_tokens)
    if prompt_tokens:
        share = prefix_tokens / prompt_tokens
    return CacheExplanation(
        previous=previous_kind, change=change, prefix_share=share,
        prefix_tokens=prefix_tokens, prompt_tokens=prompt_tokens,
        previous_tokens=previous_tokens, read_tokens=read_tokens, lost_tokens=lost,
        lost_usd=lost_usd(lost, input_per_mtok=input_per_mtok,
                          cache_read_per_mtok=cache_read_per_mtok),
        min_tokens=min_tokens)


# -- the first change -------------------------------------------------------------------------------
def first_change(previous: dict[str, Any], current: dict[str, Any]) -> tuple[Change | None, int]:
    """The first region of ``current`` that differs from ``previous``, in the order providers
    cache a request, and the characters of ``current`` before it."""
    if (previous.get("model") or "") != (current.get("model") or ""):
        return Change("model", "the model",
                      f"{previous.get('model') or '?'} before, {current.get('model') or '?'} now: "
                      "each model has its own cache."), 0
    prefix = 0
    change, chars = _tools_change(previous, current)
    prefix += chars
    if change is not None:
        return change, prefix
    change, chars = _system_change(previous.get("system") or [], current.get("system") or [])
    prefix += chars
    if change is not None:
        return change, prefix
    change, chars = _messages_change(previous.get("messages") or [], current.get("messages") or [])
    return change, prefix + chars


def _tools_change(previous: dict[str, Any], current: dict[str, Any]) -> tuple[Change | None, int]:
    before = [n for n in previous.get("tools") or [] if isinstance(n, str)]
    now = [n for n in current.get("tools") or [] if isinstance(n, str)]
    specs_before = _specs(previous)
    specs_now = _specs(current)
    prefix = 0
    for index, name in enumerate(now):
        if index >= len(before) or before[index] != name:
            break
        if name in specs_before and name in specs_now and specs_before[name] != specs_now[name]:
            return Change("tools", f"the definition of the tool {name}",
                          "Its description or parameters changed.", index + 1,
                          **_excerpts(_dumps(specs_before[name]), _dumps(specs_now[name]))), prefix
        prefix += _tool_chars(specs_now.get(name, name))
    if before == now:
        return None, prefix
    if sorted(before) == sorted(now):
        return Change("tools", "the order of the tools",
                      f"Was {', '.join(before)}; now {', '.join(now)}."), prefix
    added = [n for n in now if n not in before]
    removed = [n for n in before if n not in now]
    parts = []
    if added:
        parts.append(f"added {', '.join(added)}")
    if removed:
        parts.append(f"removed {', '.join(removed)}")
    if not parts:  # the same names, one of them twice
        parts.append(f"was {', '.join(before)}; now {', '.join(now)}")
    return Change("tools", "the tool set", "; ".join(parts).capitalize() + "."), prefix


def _system_change(before: list[Any], now: list[Any]) -> tuple[Change | None, int]:
    old = [_text(b) for b in before]
    new = [_text(b) for b in now]
    prefix = 0
    for index in range(max(len(old), len(new))):
        if index < len(old) and index < len(new) and old[index] == new[index]:
            prefix += len(new[index])
            continue
        label = f"{_system_label(now if index < len(new) else before, index)} (system block {index + 1})"
        if index >= len(new):
            return Change("system", label, "This block is no longer sent.", index + 1), prefix
        if index >= len(old):
            return Change("system", label, "This block is new.", index + 1), prefix
        return Change("system", label, _length_sentence(old[index], new[index]), index + 1,
                      **_excerpts(old[index], new[index])), prefix
    return None, prefix


def _messages_change(before: list[Any], now: list[Any]) -> tuple[Change | None, int]:
    prefix = 0
    for index, message in enumerate(now):
        if index >= len(before):
            return None, prefix  # the request goes on where the previous one ended
        if before[index] != message:
            role = _role(message)
            old, new = _message_text(before[index]), _message_text(message)
            detail = (f"It was a {_role(before[index])} message."
                      if _role(before[index]) != role else _length_sentence(old, new))
            return Change("messages", f"an earlier message: message {index + 1} ({role})", detail,
                          index + 1, role, **_excerpts(old, new)), prefix
        prefix += len(_message_text(message))
    if len(before) > len(now):
        return Change("messages", f"the history after message {len(now)}",
                      f"{len(before) - len(now)} earlier message"
                      f"{'s were' if len(before) - len(now) != 1 else ' was'} left out "
                      "(the history was trimmed or compacted).", len(now) + 1), prefix
    return None, prefix


def _system_label(blocks: list[Any], index: int) -> str:
    block = blocks[index]
    text = _text(block)
    if text.startswith(DATE_BLOCK):
        return "the date and time block (it changes with every turn; recalled memory goes there too)"
    cacheable = isinstance(block, dict) and bool(block.get("cacheable"))
    if cacheable and text.startswith(TOOL_BLOCKS):
        return "the tool instructions"
    if cacheable and not any(isinstance(b, dict) and b.get("cacheable") for b in blocks[:index]):
        return "the agent's system prompt"
    return "a system message of the history" if not cacheable else "a system block"


# -- sizes and excerpts -----------------------------------------------------------------------------
def _specs(request: dict[str, Any]) -> dict[str, Any]:
    return {s["name"]: s for s in request.get("tool_specs") or []
            if isinstance(s, dict) and isinstance(s.get("name"), str)}


def _dumps(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _tool_chars(spec: Any) -> int:
    """A tool definition's size as a model reads it: its name, description and parameters."""
    if not isinstance(spec, dict):
        return len(str(spec))
    return (len(str(spec.get("name") or "")) + len(str(spec.get("description") or ""))
            + len(_dumps(spec.get("parameters") or spec.get("input_schema") or {})))


def _text(block: Any) -> str:
    if isinstance(block, dict):
        return str(block.get("text") or "")
    return str(block or "")


def _role(message: Any) -> str:
    return str(message.get("role") or "?") if isinstance(message, dict) else "?"


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return _dumps(message)
    parts = []
    for block in message.get("blocks") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text") or ""))
        elif kind == "tool_result":
            parts.append(str(block.get("output") or ""))
        else:
            parts.append(_dumps(block))
    return "\n".join(parts)


def _request_chars(request: dict[str, Any]) -> int:
    specs = _specs(request)
    tools = sum(_tool_chars(specs.get(n, n)) for n in request.get("tools") or [] if isinstance(n, str))
    system = sum(len(_text(b)) for b in request.get("system") or [])
    return tools + system + sum(len(_message_text(m)) for m in request.get("messages") or [])


def _length_sentence(old: str, new: str) -> str:
    at = len(commonprefix([old, new]))
    return (f"{len(old):,} characters before, {len(new):,} now; they differ from character "
            f"{at + 1:,} on.")


def _excerpts(old: str, new: str) -> dict[str, str]:
    at = len(commonprefix([old, new]))
    start = max(at - EXCERPT_CHARS // 3, 0)

    def cut(text: str) -> str:
        piece = text[start:start + EXCERPT_CHARS]
        return ("…" if start else "") + piece + ("…" if start + EXCERPT_CHARS < len(text) else "")

    return {"before": cut(old), "after": cut(new)}
