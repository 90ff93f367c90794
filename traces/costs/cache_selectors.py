"""Read queries of the cache explainer: a model request's explanation (the step panel), and
what cache misses cost per agent (the costs page).

The costs page's figure is computed from the model requests of the latest ``LOSS_SAMPLE`` turns
of its range and filters, not kept in the roll-ups: it needs each request's predecessor, which the
recorder does not read on a turn's path, and the sample keeps the page within its targets on any
ledger. The page says when the figure covers only part of the range.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from agentsite.models import Team

from ..models import ModelPrice, Step, StepPayload, Trace
from ..record.request_history import full_requests
from .cache import CACHE_MIN_TOKENS, CacheExplanation, explain, lost_tokens, lost_usd
from .selectors import CostFilters, Resolved, traces_started_in

LOSS_SAMPLE = 2_000  # turns
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


# -- the costs page ---------------------------------------------------------------------------------
@dataclass
class CacheLosses:
    """Dollars lost to prompt-cache misses per agent id (0: none), over ``requests`` model
    requests; ``partial`` when the range held more turns than the sample."""

    by_agent: dict[int, Decimal] = field(default_factory=dict)
    requests: int = 0
    turns: int = 0
    partial: bool = False

    @property
    def total(self) -> Decimal:
        return sum(self.by_agent.values(), Decimal(0))


def cache_losses(*, team: Team, filters: CostFilters, resolved: Resolved,
                 limit: int = LOSS_SAMPLE) -> CacheLosses:
    """Money lost to cache misses by agent, over the successful model requests of the latest
    ``limit`` turns started in the range (each request compared with the one before it in its
    turn, or with the last request of the conversation's previous turn when that turn is in the
    sample too)."""
    if resolved.impossible:
        return CacheLosses()
    traces = traces_started_in(Trace.objects.filter(team=team), filters=filters, resolved=resolved)
    # The latest turns first, on the (team, -created_at) index; their steps by (trace, seq).
    traces = traces.order_by("-created_at", "-id")
    turns = {pk: (conversation_id, agent_id or 0) for pk, conversation_id, agent_id in
             traces.values_list("pk", "conversation_id", "agent_id")[:limit + 1]}
    losses = CacheLosses(partial=len(turns) > limit)
    if losses.partial:
        turns.pop(next(reversed(turns)))
    # The sample's traces again, as a subquery: a list of thousands of ids costs more to bind.
    steps = Step.objects.filter(trace_id__in=traces.values("pk")[:limit], kind=Step.Kind.LLM_REQUEST,
                                status=FINISHED_OK)
    if filters.model:
        steps = steps.filter(model=filters.model)
    # The price of each request by its id, from a small table of the few prices used (joining
    # the price per request made its rates into Decimals once per request: most of the time).
    rows = sorted(steps.values_list("trace_id", "seq", "input_tokens", "cache_write_tokens",
                                    "cache_read_tokens", "price_id", "meta__cache_min_tokens").order_by(),
                  key=lambda r: (turns[r[0]][0], r[0], r[1]))
    rates = {pk: (rate, read_rate) for pk, rate, read_rate in
             ModelPrice.objects.filter(pk__in={r[5] for r in rows if r[5] is not None})
             .values_list("pk", "input_per_mtok", "cache_read_per_mtok")} if rows else {}
    losses.requests, losses.turns = len(rows), len(turns)
    last_in_conversation: dict[int, int] = {}
    by_agent: dict[int, Decimal] = {}
    lost_at: dict[tuple[int, int | None], int] = defaultdict(int)  # (agent, price): tokens
    for trace_id, _, given, written, read, price_id, minimum in rows:
        conversation_id, agent_id = turns[trace_id]
        tokens = (given or 0) + (written or 0) + (read or 0)
        before = last_in_conversation.get(conversation_id)
        if before is not None:
            lost_at[(agent_id, price_id)] += lost_tokens(
                previous_tokens=before, prompt_tokens=tokens, read_tokens=int(read or 0),
                min_tokens=cache_min_tokens(minimum))
        by_agent.setdefault(agent_id, Decimal(0))
        last_in_conversation[conversation_id] = tokens
    # A price's dollars are its lost tokens times its rate: summed per price, then priced once
    # (exact: every term is a whole number of tokens times the same rate).
    for (agent_id, price_id), tokens in lost_at.items():
        rate, read_rate = rates.get(price_id, (None, None))
        by_agent[agent_id] += lost_usd(tokens, input_per_mtok=rate, cache_read_per_mtok=read_rate)
    losses.by_agent = by_agent
    return losses


def with_cache_losses(groups: list[Any], losses: CacheLosses) -> list[Any]:
    """Give each agent's row of the costs page its ``cache_lost`` dollars."""
    for group in groups:
        group.cache_lost = losses.by_agent.get(group.key or 0, Decimal(0))
    return groups
