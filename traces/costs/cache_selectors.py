"""Read queries of the cache explainer: a model request's explanation (the step panel), and
what a request's cache miss cost, recorded on its step when it is priced (``lost_meta``) and
summed in the cost ledger, which the costs page reads.

A miss is counted against the successful request before it in its conversation: the turn's
previous one, or the last one of the turn before. The recorder knows the turn's own; the one
before the turn's first request is read once (``previous_prompt_tokens``), and only when the
request's price makes a miss cost something.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from ..models import Step, StepPayload
from ..record.request_history import full_requests
from .cache import CACHE_MIN_TOKENS, CacheExplanation, explain, lost_tokens, lost_usd
from .pricing import cost_units

FINISHED_OK = Step.Status.OK


def _prompt(values: Iterable[int | None]) -> int:
    return sum(int(v or 0) for v in values)


def _requests(trace_id: int, up_to_seq: int) -> list[tuple[int, str, int, dict[str, Any]]]:
    """(seq, status, prompt tokens, stored request) of a trace's model requests up to a step."""
    rows = (StepPayload.objects
            .filter(step__trace_id=trace_id, step__kind=Step.Kind.LLM_REQUEST,
                    step__seq__lte=up_to_seq, kind=StepPayload.Kind.REQUEST)
            .order_by("step__seq")
            .values_list("step__seq", "step__status", "step__input_tokens",
                         "step__cache_write_tokens", "step__cache_read_tokens", "content"))
    found = []
    for seq, status, given, written, read, content in rows:
        try:
            request = json.loads(content)
        except ValueError:
            continue
        if isinstance(request, dict):
            found.append((seq, status, _prompt((given, written, read)), request))
    return found


def _last_ok(trace_id: int, up_to_seq: int) -> tuple[dict[str, Any] | None, int]:
    """A turn's last successful request up to ``up_to_seq``, whole, and its prompt tokens."""
    rows = _requests(trace_id, up_to_seq)
    found: tuple[dict[str, Any] | None, int] = (None, 0)
    for (_, status, tokens, _), request in zip(rows, full_requests(r[3] for r in rows), strict=True):
        if status == FINISHED_OK:
            found = (request, tokens)
    return found


def step_cache_explanation(step: Step) -> CacheExplanation | None:
    """The cache explanation of a finished model request; None for other steps."""
    if step.kind != Step.Kind.LLM_REQUEST or step.status not in (Step.Status.OK, Step.Status.ERROR):
        return None
    rows = _requests(step.trace_id, step.seq)
    if not rows or rows[-1][0] != step.seq:
        return None
    previous: dict[str, Any] | None = None
    previous_tokens = 0
    current: dict[str, Any] = {}
    for (seq, status, tokens, _), request in zip(rows, full_requests(r[3] for r in rows), strict=True):
        if seq == step.seq:
            current = request
        elif status == FINISHED_OK:
            previous, previous_tokens = request, tokens
    kind = "turn"
    if previous is None:
        kind = "conversation"
        before = (Step.objects.filter(trace__conversation_id=step.trace.conversation_id,
                                      trace_id__lt=step.trace_id, kind=Step.Kind.LLM_REQUEST,
                                      status=FINISHED_OK)
                  .order_by("-trace_id", "-seq").values_list("trace_id", "seq").first())
        if before is not None:
            previous, previous_tokens = _last_ok(*before)
    price = step.price
    return explain(previous, current, previous_kind=kind,
                   prompt_tokens=_prompt((step.input_tokens, step.cache_write_tokens,
                                          step.cache_read_tokens)),
                   previous_tokens=previous_tokens, read_tokens=int(step.cache_read_tokens or 0),
                   input_per_mtok=price.input_per_mtok if price else None,
                   cache_read_per_mtok=price.cache_read_per_mtok if price else None,
                   min_tokens=cache_min_tokens((step.meta or {}).get("cache_min_tokens")))


def cache_min_tokens(recorded: Any) -> int:
    """The provider's shortest cached prompt as its request recorded it (steps stored before it
    was recorded, or of providers that do not say: ``CACHE_MIN_TOKENS``)."""
    return recorded if isinstance(recorded, int) and recorded > 0 else CACHE_MIN_TOKENS


# -- what a miss cost, kept in the ledger -----------------------------------------------------------
def lost_meta(*, previous_tokens: int | None, prompt_tokens: int, read_tokens: int,
              min_tokens: Any, input_per_mtok: Decimal | None,
              cache_read_per_mtok: Decimal | None) -> dict[str, int]:
    """The step meta that records what a successful model request lost to a cache miss against
    the successful request before it in its conversation (``previous_tokens``: its prompt; None
    when there is none): ``cache_lost_tokens`` and ``cache_lost_units`` (its dollars at the
    step's price, in 1e-10 USD, which the cost ledger sums: ``rollups.step_share``). Empty when
    nothing was lost."""
    if previous_tokens is None:
        return {}
    tokens = lost_tokens(previous_tokens=previous_tokens, prompt_tokens=prompt_tokens,
                         read_tokens=read_tokens, min_tokens=cache_min_tokens(min_tokens))
    if not tokens:
        return {}
    return {"cache_lost_tokens": tokens, "cache_lost_units": lost_units(
        tokens, input_per_mtok=input_per_mtok, cache_read_per_mtok=cache_read_per_mtok)}


def lost_units(tokens: int, *, input_per_mtok: Decimal | None,
               cache_read_per_mtok: Decimal | None) -> int:
    """``tokens`` lost to a miss, in 1e-10 USD at a price's rates."""
    return cost_units(lost_usd(tokens, input_per_mtok=input_per_mtok,
                               cache_read_per_mtok=cache_read_per_mtok))


def previous_prompt_tokens(*, conversation_id: int | None, trace_id: int) -> int | None:
    """The prompt tokens of the latest successful model request of a conversation up to a
    trace (its own earlier requests, else the turns before it); None when there is none."""
    steps = Step.objects.filter(kind=Step.Kind.LLM_REQUEST, status=FINISHED_OK)
    steps = (steps.filter(trace__conversation_id=conversation_id, trace_id__lte=trace_id)
             if conversation_id else steps.filter(trace_id=trace_id))
    row = (steps.order_by("-trace_id", "-seq")
           .values_list("input_tokens", "cache_write_tokens", "cache_read_tokens").first())
    return _prompt(row) if row is not None else None


def losses_backfill(*, step_model: Any, price_model: Any) -> int:
    """Record on every successful model request stored before the ledger kept cache losses
    what its miss cost (``lost_meta``), comparing each with the one before it in its
    conversation; returns the steps written. For the migration that added the column (its
    historical classes); the ledger's sums follow (``rollups.cache_lost_backfill``)."""
    rates = {pk: (rate, read) for pk, rate, read in
             price_model.objects.values_list("pk", "input_per_mtok", "cache_read_per_mtok")}
    rows = (step_model.objects.filter(kind="llm_request", status="ok")
            .order_by("trace__conversation_id", "trace_id", "seq")
            .values_list("pk", "trace_id", "trace__conversation_id", "input_tokens",
                         "cache_write_tokens", "cache_read_tokens", "price_id", "meta"))
    last: dict[Any, int] = {}
    changed = []
    for pk, trace_id, conversation_id, given, written, read, price_id, meta in rows.iterator(chunk_size=2000):
        tokens = _prompt((given, written, read))
        owner = conversation_id or ("trace", trace_id)
        meta = meta if isinstance(meta, dict) else {}
        rate, read_rate = rates.get(price_id, (None, None))
        lost = lost_meta(previous_tokens=last.get(owner), prompt_tokens=tokens,
                         read_tokens=int(read or 0), min_tokens=meta.get("cache_min_tokens"),
                         input_per_mtok=rate, cache_read_per_mtok=read_rate)
        last[owner] = tokens
        if lost:
            changed.append(step_model(pk=pk, meta={**meta, **lost}))
    step_model.objects.bulk_update(changed, ["meta"], batch_size=500)
    return len(changed)
