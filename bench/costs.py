"""The costs page over a big ledger: 1,000,000 generated steps (600,000 priced model requests and
400,000 tool calls in 200,000 traces) spread over 30 days, 8 agents, 24 people and 6,000
conversations, priced with the shipped table. The roll-ups are built from the steps by
``rollups_rebuild`` (the exact maintenance path), then the page's server time is measured for a
7-day and a 30-day range.

    python -m bench.costs               # print the table
    python -m bench.costs --check       # and exit 1 if a target is missed
    python -m bench.costs --steps 100000

Server time is measured through Django's full request stack with the test client. Targets: p50
<= 500 ms for 7 days, <= 2 s for 30 days.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from datetime import timedelta
from decimal import Decimal

from django.db.models import F, Sum

from bench import _measure, _profile
from bench._django import setup_django

RUNS = 11
TARGETS_MS = {7: 500.0, 30: 2000.0}
AGENTS, PEOPLE, CONVERSATIONS = 8, 24, 6_000
STEPS_PER_TRACE = 5  # model, tool, model, tool, model
MODELS = [("OpenAI", "openai", "gpt-4o"), ("OpenAI", "openai", "gpt-4o-mini-2024-07-18"),
          ("Anthropic", "anthropic", "claude-sonnet-4-5-20250929"), ("Anthropic", "anthropic", "claude-haiku-4-5"),
          ("Gemini", "openai", "gemini-2.5-flash"), ("Local", "openai", "llama3.1:70b")]  # the last is unpriced


TOKEN_NAMES = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "reasoning_tokens")


def _plan_trace(rng: random.Random, table, team_id: int, created, kind: str, label: str, model: str):
    """One trace's steps (without the trace id) and its totals."""
    from agents.runtime.pricing import Usage

    steps, cost, sums, unpriced = [], Decimal(0), dict.fromkeys(TOKEN_NAMES, 0), 0
    for seq in range(1, STEPS_PER_TRACE + 1):
        at = created + timedelta(milliseconds=seq * 700)
        if seq % 2:
            usage = Usage(input_tokens=rng.randrange(200, 4000), output_tokens=rng.randrange(20, 800),
                          cache_read_tokens=rng.choice((0, 0, 1024, 2048)),
                          cache_write_tokens=rng.choice((0, 0, 0, 512)) if kind == "anthropic" else 0)
            priced = table.cost(provider_kind=kind, model=model, usage=usage, team_id=team_id, at=at)
            cost += priced.cost
            unpriced += priced.unpriced
            parts = usage.to_dict()
            for name in TOKEN_NAMES:
                sums[name] += parts[name]
            steps.append([None, seq, "llm_request", model, (seq + 1) // 2, "ok", True, at, seq * 700, 650.0, "",
                          label, model, "", priced.cost, priced.price_id, priced.match_kind,
                          json.dumps({"unpriced": priced.unpriced}), seq,
                          *(parts[name] for name in TOKEN_NAMES)])
        else:
            steps.append([None, seq, "tool_call", "calculator", seq // 2, "ok", True, at, seq * 700, 3.0, "", "", "",
                          f"call_{seq}", None, None, "", "{}", seq, 0, 0, 0, 0, 0])
    return steps, cost, sums, unpriced


def _generate(*, steps: int, team, user_ids, agent_ids, conversation_ids) -> tuple[int, float]:
    from django.db import connection, transaction
    from django.utils import timezone

    from traces.costs.pricing import price_table_for
    from traces.models import Step, Trace

    table = price_table_for(team.pk)
    rng = random.Random(42)  # noqa: S311 - generated benchmark data
    start = timezone.now() - timedelta(days=30)
    traces = steps // STEPS_PER_TRACE
    columns = ("trace_id", "seq", "kind", "name", "iteration", "status", "success", "started_at", "offset_ms",
               "duration_ms", "error", "provider", "model", "call_id", "cost_usd", "price_id", "price_match",
               "meta", "event_seq", *TOKEN_NAMES)
    sql = (f"INSERT INTO {connection.ops.quote_name(Step._meta.db_table)} ({', '.join(columns)}) "  # noqa: S608 - a model's table, values as parameters
           f"VALUES ({', '.join(['%s'] * len(columns))})")
    began = time.perf_counter()
    written = 0
    with transaction.atomic():
        for first in range(0, traces, 10_000):
            rows, planned = [], []
            for _ in range(min(10_000, traces - first)):
                created = start + timedelta(seconds=rng.random() * 30 * 86_400)
                label, kind, model = MODELS[rng.randrange(len(MODELS))]
                n = rng.randrange(len(conversation_ids))
                step_rows, cost, sums, unpriced = _plan_trace(rng, table, team.pk, created, kind, label, model)
                planned.append(step_rows)
                rows.append(Trace(team=team, conversation_id=conversation_ids[n], agent_id=agent_ids[n % len(agent_ids)],
                                  user_id=user_ids[n % len(user_ids)], status=Trace.Status.COMPLETED,
                                  provider_name=label, provider_kind=kind, model=model, started_at=created,
                                  finished_at=created + timedelta(seconds=4), duration_ms=4000, iterations=3,
                                  step_count=STEPS_PER_TRACE, event_seq=STEPS_PER_TRACE, cost_usd=cost,
                                  unpriced_calls=unpriced, **sums))
            made = Trace.objects.bulk_create(rows, batch_size=2000)
            values = []
            for trace, step_rows in zip(made, planned, strict=True):
                for row in step_rows:
                    row[0] = trace.pk
                    values.append(tuple(row))
            with connection.cursor() as cursor:
                cursor.executemany(sql, values)
            written += len(values)
            print(f"  {written:>9,} steps", end="\r", flush=True)
        # created_at is set on insert; spread the traces over the month they belong to
        Trace.objects.filter(team=team).update(created_at=F("started_at"))
    return written, time.perf_counter() - began


def _timed(client, url: str, runs: int = RUNS) -> tuple[float, float, float]:
    """The median and worst server time in ms, and the median CPU ms of this process."""
    times, cpu = [], []
    for _ in range(runs):
        began, cpu_began = time.perf_counter(), time.process_time()
        response = client.get(url)
        times.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - cpu_began) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    times.sort()
    return statistics.median(times), times[-1], statistics.median(cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--steps", type=int, default=1_000_000, help="steps to generate (default 1,000,000)")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)
    setup_django()

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse
    from django.utils import timezone

    from agents.models import Agent, Conversation, Provider
    from agentsite.models import Membership, Team
    from traces.costs.rollups import rollups_rebuild
    from traces.models import CostRollup, Step, Trace

    setup_test_environment()
    team = Team.objects.create(name="Bench")
    users = [get_user_model().objects.create_user(f"bench{i}", password="bench-pass-123") for i in range(PEOPLE)]
    for i, user in enumerate(users):
        Membership.objects.create(team=team, user=user, role="owner" if i == 0 else "member")
    provider = Provider.objects.create(team=team, name="Demo", kind="demo")
    agents = [Agent.objects.create(team=team, name=f"Agent {i}", provider=provider, model="demo") for i in range(AGENTS)]
    conversations = Conversation.objects.bulk_create(
        [Conversation(uuid=uuid.uuid4(), team=team, agent=agents[i % AGENTS], created_by=users[i % PEOPLE],
                      title=f"Conversation {i}") for i in range(CONVERSATIONS)], batch_size=2000)
    conversation_ids = [c.pk for c in conversations]
    user_ids = [u.pk for u in users]
    agent_ids = [a.pk for a in agents]

    print(f"generating {args.steps:,} steps over 30 days on {connection.vendor} …", flush=True)
    written, gen_s = _generate(steps=args.steps, team=team, user_ids=user_ids, agent_ids=agent_ids,
                               conversation_ids=conversation_ids)
    print(f"  {written:,} steps, {Trace.objects.count():,} traces in {gen_s:.1f} s")
    began = time.perf_counter()
    rows = rollups_rebuild(team_id=team.pk)
    print(f"  roll-ups rebuilt from the steps: {rows:,} rows in {time.perf_counter() - began:.1f} s")
    steps_cost = sum((c for c in Step.objects.filter(kind="llm_request").values_list("cost_usd", flat=True)
                      if c is not None), Decimal(0))
    units = CostRollup.objects.filter(team=team).aggregate(s=Sum("cost_units"))["s"] or 0
    ledger = Decimal(units) * Decimal("1e-10")
    print(f"  sum of step costs ${steps_cost} = roll-ups ${ledger}: {'exact' if steps_cost == ledger else 'MISMATCH'}")

    client = Client()
    client.force_login(users[0])
    today = timezone.localdate()
    print(f"\n{'range':>8}  {'what':<28} {'p50 ms':>8} {'max ms':>8} {'CPU ms':>8}  target")
    ok = steps_cost == ledger
    figures = {}
    with _profile.profiled("costs", {"bench": os.getpid()}, args.profile):
        for days in (7, 30):
            query = f"?date_from={today - timedelta(days=days - 1)}&date_to={today}"
            for what, extra in (("costs page, split by agent", ""), ("split by conversation", "&split=conversation")):
                url = reverse("costs") + query + extra
                response = client.get(url)
                total = response.context["totals"].cost
                p50, worst, cpu = _timed(client, url)
                figures[f"{days} days, {what}: CPU ms per request"] = cpu
                target = TARGETS_MS[days]
                verdict = "ok" if p50 <= target else "MISSED"
                if what.startswith("costs page") and p50 > target:
                    ok = False
                print(f"{days:>5} d  {what:<28} {p50:>8.1f} {worst:>8.1f} {cpu:>8.1f}  <= {target:.0f} ms {verdict}"
                      f"  (total ${total:.2f})")
    print("  (CPU ms: median CPU time of this process per request, with the database in process: SQLite)"
          if connection.vendor == "sqlite" else "  (CPU ms: median CPU time of this process per request)")
    _measure.record("costs" if connection.vendor == "sqlite" else f"costs-{connection.vendor}", figures)
    print("\nverdict:", "all targets met" if ok else "a target was missed")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
