"""Two runs side by side: their steps aligned, the first divergence found and said in plain
words, and their totals compared. Pure Python (no database): the caller hands in each trace's
step skeleton and a ``PayloadSource`` that reads payload contents only where they are needed.

Alignment (near-linear): the common prefix and suffix of the two runs (by step kind and name)
are matched directly; what lies between is aligned with ``difflib.SequenceMatcher`` on the
steps' signatures when it is small enough, else position by position. A tool call's signature
carries its name and the start of its arguments, so the same call is matched by name and
arguments; model requests are matched in order.

First divergence: the first aligned pair whose skeleton differs (kind, name, status, model, a
step on one side only), or, before it, whose request, response, arguments or output differ.
Contents are compared only up to that point: first by the database (raw equality), then, for the
few that are not byte-equal, after removing what changes between identical runs (request and
call ids, usage, date and time stamps). How two contents differ, in words, is
``compare_contents``; the page folds the runs of equal steps (``compare_views``)."""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from .compare_contents import LLM, TOOL, answer_diff, excerpt, payload_difference, quote

# The middle of two traces (after the common prefix and suffix) is aligned by SequenceMatcher up
# to this many cells (len(a) * len(b)); beyond it, position by position.
MATCH_CELLS = 1_000_000
# Characters of a tool call's arguments in its signature.
SIGNATURE_CHARS = 200
# Pairs whose contents are read at once while looking for the first divergence.
CONTENT_BATCH = 200

USAGE = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "reasoning_tokens")
USAGE_LABELS = {"input_tokens": "Input tokens", "output_tokens": "Output tokens",
                "cache_write_tokens": "Cache write tokens", "cache_read_tokens": "Cache read tokens",
                "reasoning_tokens": "Reasoning tokens"}
KIND_WORDS = {LLM: "model request", TOOL: "tool call", "approval": "approval", "compaction": "compaction",
              "retry": "retry", "error": "error", "resume": "resume", "hook": "hook"}


@dataclass(slots=True)
class StepFacts:
    """One step's skeleton: what the comparison needs without its payloads."""

    seq: int
    kind: str
    name: str = ""
    status: str = "ok"
    success: bool | None = None
    model: str = ""
    provider: str = ""
    error: str = ""
    # The kinds of payload the step has (request, response, message, arguments, output …).
    payloads: set[str] = field(default_factory=set)
    # The start of a tool call's arguments (its signature).
    head: str = ""

    @property
    def signature(self) -> tuple[str, str, str]:
        if self.kind == LLM:
            return (LLM, "", "")
        if self.kind == TOOL:
            return (TOOL, self.name, self.head[:SIGNATURE_CHARS])
        return (self.kind, self.name, "")

    @property
    def label(self) -> str:
        word = KIND_WORDS.get(self.kind, self.kind)
        if self.kind == LLM:
            return f"{word} {self.model}".strip()
        return f"{word} {self.name}".strip()


@dataclass(slots=True)
class TraceFacts:
    """A trace's totals and answer, beside its steps."""

    steps: list[StepFacts]
    iterations: int = 0
    step_count: int = 0
    duration_ms: int | None = None
    cost_usd: Decimal = Decimal(0)
    answer: str = ""
    status: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    # The whole run's model requests and tool calls by tool name, like the other totals (the
    # steps above may start at a fork point); None: count them among the steps.
    whole_run: Counter[tuple[str, str]] | None = None

    def counted(self, kind: str, name: str | None = None) -> int:
        if self.whole_run is not None:
            return sum(n for (k, tool), n in self.whole_run.items()
                       if k == kind and (name is None or tool == name))
        return sum(1 for s in self.steps if s.kind == kind and (name is None or s.name == name))

    def tool_names(self) -> set[str]:
        if self.whole_run is not None:
            return {tool for (k, tool), n in self.whole_run.items() if k == TOOL and n}
        return {s.name for s in self.steps if s.kind == TOOL}


@dataclass(slots=True)
class Pair:
    """One aligned position (1-based) with a step of each side, or of one side only."""

    position: int
    a: StepFacts | None
    b: StepFacts | None
    # same: verified equal · matched: same signature, contents not compared (after the first
    # divergence) · differs · a_only · b_only
    state: str = "matched"
    note: str = ""

    @property
    def one_sided(self) -> bool:
        return self.a is None or self.b is None


@dataclass(slots=True)
class Divergence:
    position: int
    a_seq: int | None
    b_seq: int | None
    what: str  # kind, name, status, model, request, response, arguments, output, a_only, b_only
    detail: str
    summary: str = ""


@dataclass(slots=True)
class TotalRow:
    label: str
    key: str
    a: Any
    b: Any
    difference: Any
    differs: bool


@dataclass(slots=True)
class Comparison:
    pairs: list[Pair]
    divergence: Divergence | None
    totals: list[TotalRow]
    tools: list[TotalRow]
    answers_same: bool
    answer_diff: list[tuple[str, str]]
    by_position: bool = False


class PayloadSource(Protocol):
    """Reads payloads for the aligned pairs ``(position, a_seq, b_seq)``."""

    def raw_different(self, pairs: Sequence[tuple[int, int, int]]) -> set[tuple[int, str]]:
        """The ``(position, payload kind)`` whose contents are not byte-equal on both sides."""

    def contents(self, items: Sequence[tuple[int, int, int, str]]) -> dict[tuple[int, str], tuple[str, str]]:
        """For ``(position, a_seq, b_seq, kind)``: both contents."""


# -- alignment ------------------------------------------------------------------------------------
def align(a: Sequence[StepFacts], b: Sequence[StepFacts],
          load_heads: Callable[[Sequence[StepFacts], Sequence[StepFacts]], None] | None = None,
          ) -> tuple[list[Pair], bool]:
    """The aligned pairs, and whether part of the middle had to be paired by position.

    The common prefix and suffix are found by kind and name; only the steps between them are
    aligned by their whole signature, with tool arguments (``load_heads`` fills their ``head``
    first, so a long common run never needs its arguments read)."""
    ka = [(s.kind, s.name) for s in a]
    kb = [(s.kind, s.name) for s in b]
    n, m = len(ka), len(kb)
    start = 0
    while start < n and start < m and ka[start] == kb[start]:
        start += 1
    end = 0
    while end < n - start and end < m - start and ka[n - 1 - end] == kb[m - 1 - end]:
        end += 1
    index_pairs: list[tuple[int | None, int | None]] = [(i, i) for i in range(start)]
    mid_a, mid_b = range(start, n - end), range(start, m - end)
    by_position = False
    if len(mid_a) and len(mid_b) and len(mid_a) * len(mid_b) <= MATCH_CELLS:
        if load_heads is not None:
            load_heads(a[start:n - end], b[start:m - end])
        sa = [s.signature for s in a[start:n - end]]
        sb = [s.signature for s in b[start:m - end]]
        matcher = difflib.SequenceMatcher(None, sa, sb, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                index_pairs += [(start + i1 + k, start + j1 + k) for k in range(i2 - i1)]
            else:
                index_pairs += _zip(range(start + i1, start + i2), range(start + j1, start + j2))
    else:
        by_position = bool(len(mid_a) and len(mid_b))
        index_pairs += _zip(mid_a, mid_b)
    index_pairs += [(n - end + k, m - end + k) for k in range(end)]
    pairs = [Pair(pos, a[i] if i is not None else None, b[j] if j is not None else None)
             for pos, (i, j) in enumerate(index_pairs, start=1)]
    return pairs, by_position


def _zip(ra: range, rb: range) -> list[tuple[int | None, int | None]]:
    """Position by position; the longer side's rest on its own."""
    common = min(len(ra), len(rb))
    out: list[tuple[int | None, int | None]] = [(ra[k], rb[k]) for k in range(common)]
    out += [(i, None) for i in ra[common:]]
    out += [(None, j) for j in rb[common:]]
    return out


# -- differences ----------------------------------------------------------------------------------
def compared_kinds(a: StepFacts, b: StepFacts) -> tuple[str, ...]:
    """The payloads that say what a step did: a model request's request and what it answered (the
    stored message, free of the provider's response id, when both have one), a tool call's
    arguments and output, and any other step's output."""
    if a.kind == LLM:
        answer = "message" if "message" in a.payloads and "message" in b.payloads else "response"
        return ("request", answer)
    if a.kind in (TOOL, "approval"):
        return ("arguments", "output")
    return ("output",)


def skeleton_difference(pair: Pair) -> tuple[str, str] | None:
    """What differs in the two steps' skeletons, as ``(what, plain words)``; None when nothing."""
    a, b = pair.a, pair.b
    if a is None and b is not None:
        return "b_only", f"only run B has a {b.label} here (#{b.seq})"
    if b is None and a is not None:
        return "a_only", f"only run A has a {a.label} here (#{a.seq})"
    assert a is not None and b is not None
    if (a.kind == b.kind and a.name == b.name and a.model == b.model and a.provider == b.provider
            and a.status == b.status and a.success == b.success and a.payloads == b.payloads):
        return None
    if a.kind != b.kind:
        return "kind", f"run A has a {a.label}, run B a {b.label}"
    if a.name != b.name and a.kind != LLM:
        return "name", f"run A called {a.name or '—'}, run B called {b.name or '—'}"
    if (a.model, a.provider) != (b.model, b.provider):
        return "model", (f"model {quote(a.model)} on {a.provider or '?'} vs {quote(b.model)} "
                         f"on {b.provider or '?'}")
    if a.status != b.status or a.success != b.success:
        return "status", f"{_outcome(a)} in run A, {_outcome(b)} in run B"
    for kind in compared_kinds(a, b):
        if (kind in a.payloads) != (kind in b.payloads):
            have, lack = ("A", "B") if kind in a.payloads else ("B", "A")
            return kind, f"run {have} recorded its {kind}, run {lack} did not"
    return None


def _outcome(step: StepFacts) -> str:
    if step.status == "error" or step.success is False:
        return f"failed ({excerpt(step.error)})" if step.error else "failed"
    return {"running": "still running", "waiting": "waiting"}.get(step.status, "succeeded")


# -- the first divergence -------------------------------------------------------------------------
def first_divergence(pairs: list[Pair], source: PayloadSource) -> Divergence | None:
    """The first aligned pair that differs; marks every pair's state on the way."""
    limit = len(pairs)
    skeleton: tuple[str, str] | None = None
    for pair in pairs:
        skeleton = skeleton_difference(pair)
        if skeleton is not None:
            limit = pair.position - 1
            break
    found: Divergence | None = None
    checked = [(p.position, p.a.seq, p.b.seq) for p in pairs[:limit] if p.a is not None and p.b is not None]
    different = source.raw_different(checked) if checked else set()
    candidates = []
    for position, _, _ in checked:
        pair = pairs[position - 1]
        assert pair.a is not None and pair.b is not None
        candidates += [(pair, kind) for kind in compared_kinds(pair.a, pair.b) if (position, kind) in different]
    for start in range(0, len(candidates), CONTENT_BATCH):
        batch = candidates[start:start + CONTENT_BATCH]
        contents = source.contents([(p.position, p.a.seq, p.b.seq, kind) for p, kind in batch])  # type: ignore[union-attr]
        for pair, kind in batch:
            left, right = contents.get((pair.position, kind), ("", ""))
            detail = payload_difference(pair.a.kind, kind, left, right)  # type: ignore[union-attr]
            if detail is not None:
                found = _divergence(pair, kind, detail)
                break
        if found is not None:
            break
    if found is None and skeleton is not None and limit < len(pairs):
        what, detail = skeleton
        also = _request_besides_model(pairs[limit], source) if what == "model" else None
        found = _divergence(pairs[limit], what, f"{detail}; {also}" if also else detail)
    _mark(pairs, found)
    return found


def _request_besides_model(pair: Pair, source: PayloadSource) -> str | None:
    """How a model request sent to another model differs besides the model (a fork that also
    edited the message or the system prompt), in words; None when nothing else differs."""
    if pair.a is None or pair.b is None or pair.a.kind != LLM or "request" not in pair.a.payloads:
        return None
    left, right = source.contents([(pair.position, pair.a.seq, pair.b.seq, "request")]).get(
        (pair.position, "request"), ("", ""))
    sides = []
    for content in (left, right):
        try:
            request = json.loads(content)
        except ValueError:
            return None
        if not isinstance(request, dict):
            return None
        request.pop("model", None)
        sides.append(json.dumps(request))
    detail = payload_difference(LLM, "request", *sides)
    return detail.replace("the request differs", "the request differs too", 1) if detail else None


def _divergence(pair: Pair, what: str, detail: str) -> Divergence:
    a, b = pair.a, pair.b
    step = a or b
    assert step is not None
    if a is not None and b is not None and a.seq == b.seq:
        where = f"Step {a.seq}"
    else:
        where = f"Step {a.seq if a else '—'} of run A / {b.seq if b else '—'} of run B"
    same_thing = a is not None and b is not None and a.kind == b.kind and (a.name == b.name or a.kind == LLM)
    subject = f"{step.label} — " if same_thing else ""
    return Divergence(position=pair.position, a_seq=a.seq if a else None, b_seq=b.seq if b else None,
                      what=what, detail=detail, summary=f"{where}: {subject}{detail}")


def _mark(pairs: list[Pair], divergence: Divergence | None) -> None:
    mark_states(pairs, divergence.position if divergence else None)
    if divergence is not None:
        pairs[divergence.position - 1].note = divergence.detail


def mark_states(pairs: Iterable[Pair], divergence: int | None) -> None:
    """Each pair's state, given the position of the first divergence (None: there is none)."""
    cut = divergence if divergence is not None else 1 << 62
    for pair in pairs:
        if pair.a is None:
            pair.state = "b_only"
        elif pair.b is None:
            pair.state = "a_only"
        elif pair.position < cut:
            pair.state = "same"
        elif pair.position == cut:
            pair.state = "differs"
        else:
            pair.state = "matched" if skeleton_difference(pair) is None else "differs"


# -- totals ---------------------------------------------------------------------------------------
def totals(a: TraceFacts, b: TraceFacts) -> list[TotalRow]:
    rows = [
        _row("Iterations", "iterations", a.iterations, b.iterations),
        _row("Steps", "steps", a.step_count or len(a.steps), b.step_count or len(b.steps)),
        _row("Model requests", "model_requests", a.counted(LLM), b.counted(LLM)),
        _row("Tool calls", "tool_calls", a.counted(TOOL), b.counted(TOOL)),
    ]
    for name in USAGE:
        rows.append(_row(USAGE_LABELS[name], name, int(a.usage.get(name) or 0), int(b.usage.get(name) or 0)))
    rows.append(_row("Cost (USD)", "cost_usd", a.cost_usd, b.cost_usd))
    rows.append(_row("Duration (ms)", "duration_ms", a.duration_ms, b.duration_ms))
    return rows


def tools_used(a: TraceFacts, b: TraceFacts) -> list[TotalRow]:
    return [_row(name, name, a.counted(TOOL, name), b.counted(TOOL, name))
            for name in sorted(a.tool_names() | b.tool_names())]


def _row(label: str, key: str, a: Any, b: Any) -> TotalRow:
    difference = b - a if a is not None and b is not None else None
    return TotalRow(label=label, key=key, a=a, b=b, difference=difference, differs=a != b)


def compare(a: TraceFacts, b: TraceFacts, source: PayloadSource,
            load_heads: Callable[[Sequence[StepFacts], Sequence[StepFacts]], None] | None = None) -> Comparison:
    pairs, by_position = align(a.steps, b.steps, load_heads)
    divergence = first_divergence(pairs, source)
    same_answer = a.answer == b.answer
    return Comparison(pairs=pairs, divergence=divergence, totals=totals(a, b), tools=tools_used(a, b),
                      answers_same=same_answer, answer_diff=[] if same_answer else answer_diff(a.answer, b.answer),
                      by_position=by_position)


def divergence_facts(divergence: Divergence | None) -> dict[str, Any] | None:
    if divergence is None:
        return None
    return {"position": divergence.position, "a_seq": divergence.a_seq, "b_seq": divergence.b_seq,
            "what": divergence.what, "detail": divergence.detail, "summary": divergence.summary}

