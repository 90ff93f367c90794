"""Database reads of a comparison (``traces.debug.compare``): each trace's skeleton in two queries
(its steps; their payload kinds, from an index), the start of tool arguments only for the steps
that the common prefix and suffix leave to align, payloads compared for raw
equality inside the database (no content leaves it), and contents read only for the pairs that
are not byte-equal, in batches, up to the first divergence."""

from __future__ import annotations

import gc
import json
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal

from django.db.models import Count, Exists, OuterRef
from django.db.models.functions import Substr

from ..models import Step, StepPayload, Trace
from ..record.request_history import full_requests
from . import compare
from .compare import Comparison, StepFacts, TraceFacts

# In the order of ``StepFacts``' fields (its totals come from the trace rows).
STEP_FIELDS = ("seq", "kind", "name", "status", "success", "model", "provider", "error")
COMPARED_KINDS = ("request", "response", "message", "arguments", "output")
# Beyond this many runs of pairs with a constant seq offset, raw equality is not asked of the
# database (every pair's contents are read and compared instead).
MAX_RUNS = 50


def fork_start(a: Trace, b: Trace) -> tuple[int | None, int | None]:
    """Where each side's steps are compared from when one run is a fork of the other: the
    fork's record starts at the fork point (the steps before it are the parent's, copied), so
    the parent is compared from that step on. (None, None) for two unrelated runs."""
    if b.forked_from_id == a.pk and b.fork_seq:
        return b.fork_seq, None
    if a.forked_from_id == b.pk and a.fork_seq:
        return None, a.fork_seq
    return None, None


def trace_facts(trace: Trace, *, from_seq: int | None = None) -> TraceFacts:
    """The trace's skeleton (from step ``from_seq`` on, when given). The step that says a run
    was forked or resumed is left out: it is not something the run did."""
    rows = trace.steps.exclude(kind="resume").order_by("seq")
    if from_seq is not None:
        rows = rows.filter(seq__gte=from_seq)
    steps = [StepFacts(*row) for row in rows.values_list(*STEP_FIELDS)]
    by_seq = {s.seq: s for s in steps}
    # Only the step and kind: the unique (step, kind) index answers without reading the rows
    # (their content comes first, so any later column is behind it).
    for seq, kind in StepPayload.objects.filter(step__trace=trace).values_list("step__seq", "kind"):
        step = by_seq.get(seq)
        if step is not None:
            step.payloads.add(kind)
    whole_run = None
    if from_seq is not None:  # the totals are the whole run's: count what the steps leave out
        whole_run = Counter({(kind, name): n for kind, name, n in (
            trace.steps.filter(kind__in=(compare.LLM, compare.TOOL)).order_by()
            .values_list("kind", "name").annotate(n=Count("id")))})
    return TraceFacts(steps=steps, iterations=trace.iterations, step_count=trace.step_count,
                      duration_ms=trace.duration_ms, cost_usd=trace.cost_usd or Decimal(0),
                      answer=trace.answer, status=trace.status, usage=trace.usage_dict(),
                      whole_run=whole_run)


def heads_loader(a: Trace, b: Trace) -> Callable[[Sequence[StepFacts], Sequence[StepFacts]], None]:
    """For ``compare.align``: fill in the start of the arguments of the tool calls among the
    steps to align (one query per side, over their range of steps)."""

    def load(steps_a: Sequence[StepFacts], steps_b: Sequence[StepFacts]) -> None:
        for trace, steps in ((a, steps_a), (b, steps_b)):
            calls = {s.seq: s for s in steps if s.kind == compare.TOOL}
            if not calls:
                continue
            rows = (StepPayload.objects.filter(step__trace=trace, step__seq__gte=min(calls),
                                               step__seq__lte=max(calls), kind="arguments")
                    .values_list("step__seq", Substr("content", 1, compare.SIGNATURE_CHARS)))
            for seq, head in rows:
                if seq in calls:
                    calls[seq].head = head

    return load


class DatabasePayloads:
    """``compare.PayloadSource`` over two stored traces."""

    def __init__(self, a: Trace, b: Trace) -> None:
        self.a, self.b = a, b

    def raw_different(self, pairs: Sequence[tuple[int, int, int]]) -> set[tuple[int, str]]:
        runs = _runs(pairs)
        if len(runs) > MAX_RUNS:
            return {(position, kind) for position, _, _ in pairs for kind in COMPARED_KINDS}
        out: set[tuple[int, str]] = set()
        for first, last, offset, position_of in runs:
            same_in_b = StepPayload.objects.filter(
                step__trace=self.b, step__seq=OuterRef("step__seq") + offset, kind=OuterRef("kind"),
                content=OuterRef("content"))
            rows = (StepPayload.objects.filter(step__trace=self.a, step__seq__gte=first, step__seq__lte=last,
                                               kind__in=COMPARED_KINDS)
                    .filter(~Exists(same_in_b)).values_list("step__seq", "kind"))
            out.update((position_of + seq - first, kind) for seq, kind in rows)
        return out

    def contents(self, items: Sequence[tuple[int, int, int, str]]) -> dict[tuple[int, str], tuple[str, str]]:
        kinds = {kind for *_, kind in items}
        left = self._read(self.a, {a for _, a, _, _ in items}, kinds)
        right = self._read(self.b, {b for _, _, b, _ in items}, kinds)
        out = {(position, kind): (left.get((a, kind), ""), right.get((b, kind), ""))
               for position, a, b, kind in items}
        for position, a, b, kind in items:
            if kind == "request":
                out[(position, kind)] = self._whole_if_uneven(a, b, *out[(position, kind)])
        return out

    def _whole_if_uneven(self, a_seq: int, b_seq: int, left: str, right: str) -> tuple[str, str]:
        """Two requests recorded from different points of their conversations (a fork's first
        request records all it sent; its parent's, only what came after the request before it)
        are compared whole: each side rebuilt from its turn's earlier requests. Otherwise a
        change before the later offset, such as a fork's edited message, would not be seen."""
        offsets = (_message_offset(left), _message_offset(right))
        if offsets[0] == offsets[1] or None in offsets:
            return left, right
        return (_whole_request(self.a, a_seq) if offsets[0] else left,
                _whole_request(self.b, b_seq) if offsets[1] else right)

    @staticmethod
    def _read(trace: Trace, seqs: set[int], kinds: set[str]) -> dict[tuple[int, str], str]:
        rows = (StepPayload.objects.filter(step__trace=trace, step__seq__in=sorted(seqs), kind__in=sorted(kinds))
                .values_list("step__seq", "kind", "content"))
        return {(seq, kind): content for seq, kind, content in rows}


def _message_offset(content: str) -> int | None:
    try:
        request = json.loads(content)
    except ValueError:
        return None
    return int(request.get("message_offset") or 0) if isinstance(request, dict) else None


def _whole_request(trace: Trace, seq: int) -> str:
    """The request of step ``seq`` as it was sent, rebuilt from the turn's requests up to it."""
    rows = (StepPayload.objects.filter(step__trace=trace, step__kind=Step.Kind.LLM_REQUEST,
                                       step__seq__lte=seq, kind=StepPayload.Kind.REQUEST)
            .order_by("step__seq").values_list("content", flat=True))
    requests = []
    for content in rows:
        try:
            request = json.loads(content)
        except ValueError:
            continue
        if isinstance(request, dict):
            requests.append(request)
    whole = deque(full_requests(requests), maxlen=1)
    return json.dumps(whole[0]) if whole else ""


def _runs(pairs: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
    """Consecutive pairs whose seqs both grow by one, as ``(first a seq, last a seq, b - a,
    position of the first)``."""
    runs: list[tuple[int, int, int, int]] = []
    for position, a, b in pairs:
        if runs:
            first, last, offset, start = runs[-1]
            if a == last + 1 and b - a == offset and position == start + (a - first):
                runs[-1] = (first, a, offset, start)
                continue
        runs.append((a, a, b - a, position))
    return runs


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Tens of thousands of small objects in a row set off the cyclic garbage collector again and
    again (each pass walks the whole heap); they hold no cycles, so it waits until they are made."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def trace_comparison(a: Trace, b: Trace) -> Comparison:
    start_a, start_b = fork_start(a, b)
    with _collector_paused():
        return compare.compare(trace_facts(a, from_seq=start_a), trace_facts(b, from_seq=start_b),
                               DatabasePayloads(a, b), heads_loader(a, b))


def folded_pairs(a: Trace, b: Trace, *, start: int, end: int, divergence: int | None) -> list[compare.Pair]:
    """Pairs ``start``..``end`` of a folded run, aligned again without reading contents: before
    the first divergence (``divergence``, a position) they were found equal, after it matched."""
    with _collector_paused():
        start_a, start_b = fork_start(a, b)
        pairs, _ = compare.align(trace_facts(a, from_seq=start_a).steps,
                                 trace_facts(b, from_seq=start_b).steps, heads_loader(a, b))
    rows = pairs[max(start, 1) - 1:end]
    compare.mark_states(rows, divergence)
    return rows
