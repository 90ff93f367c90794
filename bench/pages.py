"""The pages people open most, on a team with 10,000 traces: server time, CPU and SQL queries
per page, in production settings.

    python -m bench.pages            # print the table
    python -m bench.pages --check    # and exit 1 if a target is missed
    python -m bench.pages --traces 2000 --runs 15

The team (its owner "bench" and five members, four agents, 1,000 conversations) has 10,000
finished traces over the last 30 days: a model request, a tool call, a model request, a tool
call and an answer each, priced with the shipped table, with their user and assistant messages,
and two budgets. The roll-ups the costs page reads are rebuilt from the steps
(``rollups_rebuild``, the maintenance path), so they are what real usage leaves. Beside them, the
owner's conversation of 20 turns run for real (``turn_start`` then ``turn_run`` on the offline
demo model with the calculator: a tool call each), and two generated traces of 50 and 2,000
steps for the inspector.

Each page is requested signed in as the owner (and the trace list as a member too: the
traces of their own conversations and of the shared ones), through Django's whole request stack with the
test client (no network): ``DEBUG`` off, the static files collected into the scratch directory
with the production storage (hashed names, compressed), as ``collectstatic`` leaves them for
daphne. The pages are timed in rounds, each requesting every page once in turn (a shared
machine's speed moves during a run: every page meets the same spells). Printed per page: the
median and 90th percentile of server time, the median CPU time of
this process per request (SQLite is in process, so its work counts), and the SQL queries of one
request. Targets: median <= 10 ms and <= 8 queries for home, the conversation, the trace list
and the inspector; <= 30 ms for the costs page.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

# As in production: no debug, no query log; plain HTTP from the test client.
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
# The test client's host. (Not ``setup_test_environment``: it instruments every template render
# with a signal, which production does not pay.)
os.environ.setdefault("ALLOWED_HOSTS", "testserver")

from bench import (  # noqa: E402 - after the environment above
    _measure,
    _profile,
    _redis,  # noqa: F401 - an embedded Redis (the real turns enqueue), before Django reads REDIS_URL
)
from bench._django import setup_django  # noqa: E402

RUNS = 30
WARM_UP = 3
TRACES = 10_000
CONVERSATIONS = 1_000
PEOPLE = 6
TURNS = 20
INSPECTED = (50, 2_000)
PAGE_MS, COSTS_MS, PAGE_QUERIES = 10.0, 30.0, 8


def _people_and_agents():
    from django.contrib.auth import get_user_model

    from agents.models import Agent, Provider, Tool
    from agents.runtime.builtin import CalculatorTool, CurrentTimeTool
    from agentsite.models import Membership, Team
    from traces.models import Budget

    team = Team.objects.create(name="Bench")
    users = [get_user_model().objects.create_user("bench" if i == 0 else f"person{i}", password="bench-pass-123")
             for i in range(PEOPLE)]
    for i, user in enumerate(users):
        Membership.objects.create(team=team, user=user, role="owner" if i == 0 else "member")
    demo = Provider.objects.create(team=team, name="Demo", kind="demo")
    openai = Provider.objects.create(team=team, name="OpenAI", kind="openai")
    anthropic = Provider.objects.create(team=team, name="Anthropic", kind="anthropic")
    tools = [Tool.objects.create(team=team, name=spec.name, kind="builtin", policy="allow",
                                 description=spec.description, parameters=spec.parameters)
             for spec in (CalculatorTool, CurrentTimeTool)]
    agents = []
    for name, provider, model in (("Helper", demo, "demo"), ("Researcher", openai, "gpt-4o"),
                                  ("Writer", anthropic, "claude-sonnet-4-5-20250929"),
                                  ("Triage", openai, "gpt-4o-mini-2024-07-18")):
        agent = Agent.objects.create(team=team, name=name, provider=provider, model=model,
                                     description=f"The team's {name.lower()}.",
                                     suggested_prompts=["What is 12 * 7?", "What time is it?"])
        agent.tools.set(tools)
        agents.append(agent)
    Budget.objects.create(team=team, period=Budget.Period.MONTH, limit_usd=Decimal("500"), mode="warn")
    Budget.objects.create(team=team, user=users[0], period=Budget.Period.DAY, limit_usd=Decimal("20"), mode="warn")
    return team, users, agents


def _generate(*, team, users, agents, traces: int) -> None:
    """``traces`` finished traces in ``CONVERSATIONS`` conversations over the last 30 days, with
    their steps and messages, written in bulk."""
    from django.db import transaction
    from django.db.models import F, Max
    from django.utils import timezone

    from agents.models import Conversation, Message
    from bench.costs import STEPS_PER_TRACE, _plan_trace
    from traces.costs.pricing import price_table_for
    from traces.models import Step, Trace

    rng = random.Random(29)  # noqa: S311 - generated benchmark data
    table = price_table_for(team.pk)
    now = timezone.now()
    columns = [f.attname for f in Step._meta.concrete_fields if f.attname != "id"]
    planned_columns = ("trace_id", "seq", "kind", "name", "iteration", "status", "success", "started_at",
                       "offset_ms", "duration_ms", "error", "provider", "model", "call_id", "cost_usd",
                       "price_id", "price_match", "meta", "event_seq", "input_tokens", "output_tokens",
                       "cache_write_tokens", "cache_read_tokens", "reasoning_tokens")
    assert set(planned_columns) <= set(columns), set(planned_columns) - set(columns)
    with transaction.atomic():
        conversations = Conversation.objects.bulk_create(
            [Conversation(team=team, agent=agents[i % len(agents)], created_by=users[i % len(users)],
                          title=f"Conversation {i}: quarterly numbers", shared=i % 5 == 0)
             for i in range(CONVERSATIONS)], batch_size=1000)
        starts = sorted(now - timedelta(seconds=rng.random() * 30 * 86_400) for _ in range(traces))
        plans = []
        by_id = {a.pk: a for a in agents}
        for index, started in enumerate(starts):
            conversation = conversations[rng.randrange(len(conversations))]
            agent = by_id[conversation.agent_id]
            kind, model = agent.provider.kind, agent.model
            steps, cost, sums, unpriced = _plan_trace(rng, table, team.pk, started, kind, agent.provider.name, model)
            plans.append((index, started, conversation, agent, steps, cost, sums, unpriced))
        questions = Message.objects.bulk_create(
            [Message(conversation=c, role="user", text=f"Question {i}: what were the numbers?",
                     blocks=[{"type": "text", "text": f"Question {i}: what were the numbers?"}],
                     author_id=c.created_by_id)
             for i, _, c, *_ in plans], batch_size=1000)
        made = Trace.objects.bulk_create(
            [Trace(team=team, conversation=c, agent=a, user_id=c.created_by_id, user_message=q,
                   status=Trace.Status.COMPLETED, provider_name=a.provider.name, provider_kind=a.provider.kind,
                   model=a.model, started_at=at, finished_at=at + timedelta(seconds=4), duration_ms=4000,
                   iterations=3, step_count=STEPS_PER_TRACE, event_seq=STEPS_PER_TRACE, cost_usd=cost,
                   unpriced_calls=unpriced, answer=f"The numbers for question {i} are up 4 %.", **sums)
             for (i, at, c, a, _steps, cost, sums, unpriced), q in zip(plans, questions, strict=True)],
            batch_size=1000)
        rows = []
        for trace, (_i, _at, _c, _a, steps, *_rest) in zip(made, plans, strict=True):
            for values in steps:
                row = dict(zip(planned_columns, values, strict=True))
                row["trace_id"] = trace.pk
                rows.append(Step(**row))
        Step.objects.bulk_create(rows, batch_size=2000)
        Message.objects.bulk_create(
            [Message(conversation=c, role="assistant", trace=t, text=t.answer,
                     blocks=[{"type": "text", "text": t.answer}])
             for t, (_i, _at, c, *_rest) in zip(made, plans, strict=True)], batch_size=1000)
        # Each message continues its conversation's previous turn; times as they were.
        previous: dict[int, int] = {}
        for trace, question in zip(made, questions, strict=True):
            if trace.conversation_id in previous:
                question.parent_turn_id = previous[trace.conversation_id]
            previous[trace.conversation_id] = trace.pk
        Message.objects.bulk_update([q for q in questions if q.parent_turn_id], ["parent_turn"], batch_size=1000)
        Trace.objects.filter(team=team).update(created_at=F("started_at"))
        for conversation_id, last in (Trace.objects.filter(team=team).values("conversation_id")
                                      .annotate(last=Max("finished_at")).values_list("conversation_id", "last")):
            Conversation.objects.filter(pk=conversation_id).update(updated_at=last)


def _real_conversation(*, team, owner, agent):
    """The owner's conversation of ``TURNS`` turns, each run as a worker runs it: a calculator
    call and its answer."""
    from agents.chat.services import conversation_create
    from agents.turns.services import turn_start
    from agents.turns.tasks import turn_run
    from agentsite.models import Membership

    membership = Membership.objects.select_related("user", "team").get(team=team, user=owner)
    conversation = conversation_create(membership=membership, agent=agent)
    for n in range(TURNS):
        trace = turn_start(conversation=conversation, membership=membership,
                           text=f"What is {n + 12} * {n + 7}?")
        status = turn_run(trace.pk)
        if status != "completed":
            raise SystemExit(f"a turn of the conversation ended {status}")
    return conversation


def _collect_static() -> None:
    """What ``collectstatic`` leaves for production (hashed, compressed), into the scratch
    directory's STATIC_ROOT."""
    from django.core.management import call_command

    call_command("collectstatic", interactive=False, verbosity=0)


def _page_queries(client, url: str) -> list[str]:
    """Warm the page up, then the SQL of one request of it."""
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    for _ in range(WARM_UP):
        assert client.get(url).status_code == 200, url
    reset_queries()  # a request clears the log as it starts: count from an empty one
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return [q["sql"] for q in captured.captured_queries]  # before the next request clears the log


def _timed_rounds(pages: list, runs: int) -> list[Any]:
    """Each page's ``Timed``, from ``runs`` rounds that request every page once in turn: on a
    shared machine whose speed moves during a run, every page meets the same spells."""
    samples: list[list] = [[] for _ in pages]
    for _ in range(runs):
        for index, (_name, url, _limit, who) in enumerate(pages):
            samples[index].append(_measure.timed_get(who, url, runs=1))
    timed = []
    for one in samples:
        times, cpu = sorted(t.p50_ms for t in one), [t.cpu_ms for t in one]
        timed.append(_measure.Timed(statistics.median(times), times[int(len(times) * 0.9) - 1], one[-1].body,
                                  statistics.median(cpu)))
    return timed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--traces", type=int, default=TRACES, help=f"traces to generate (default {TRACES:,})")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"requests timed per page (default {RUNS})")
    parser.add_argument("--queries", action="store_true", help="print each page's SQL")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)
    setup_django()

    from django.conf import settings
    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from traces.costs.rollups import rollups_rebuild
    from traces.models import Trace
    from traces.sample import make_sample_trace

    assert not settings.DEBUG and "testserver" in settings.ALLOWED_HOSTS
    _collect_static()
    began = time.perf_counter()
    team, users, agents = _people_and_agents()
    owner = users[0]
    _generate(team=team, users=users, agents=agents, traces=args.traces)
    generated_s = time.perf_counter() - began
    conversation = _real_conversation(team=team, owner=owner, agent=agents[0])
    from agents.chat.services import conversation_create
    from agentsite.models import Membership

    inspected = conversation_create(membership=Membership.objects.get(team=team, user=owner), agent=agents[0])
    sampled = {steps: make_sample_trace(conversation=inspected, user=owner, steps=steps) for steps in INSPECTED}
    rows = rollups_rebuild(team_id=team.pk)
    print(f"{Trace.objects.filter(team=team).count():,} traces ({args.traces:,} generated in {generated_s:.1f} s, "
          f"{TURNS} turns run, {len(INSPECTED)} sampled), {rows:,} roll-up rows")

    client = Client()
    client.force_login(owner)
    member = Client()  # a member sees their own conversations' traces and the shared ones
    member.force_login(users[1])
    today = timezone.localdate()
    costs = reverse("costs")
    pages = [
        ("home", reverse("home"), PAGE_MS, client),
        (f"conversation, {TURNS} turns", reverse("conversation", args=[conversation.uuid]), PAGE_MS, client),
        ("trace list", reverse("traces"), PAGE_MS, client),
        ("trace list, a member's", reverse("traces"), PAGE_MS, member),
        *((f"inspector, {steps:,} steps", reverse("trace_detail", args=[trace.uuid]), PAGE_MS, client)
          for steps, trace in sampled.items()),
        ("costs, 7 days", f"{costs}?date_from={today - timedelta(days=6)}&date_to={today}", COSTS_MS, client),
        ("costs, 30 days", f"{costs}?date_from={today - timedelta(days=29)}&date_to={today}", COSTS_MS, client),
    ]
    print(f"\n{'page':<26} {'p50 ms':>8} {'p90 ms':>8} {'CPU ms':>8} {'queries':>8}  target")
    figures, missed = {}, []
    with _profile.profiled("pages", {"bench": os.getpid()}, args.profile):
        statements = [_page_queries(who, url) for _name, url, _limit, who in pages]
        rounds = _timed_rounds(pages, args.runs)
        for (name, _url, limit, _who), sql, timed in zip(pages, statements, rounds, strict=True):
            queries = len(sql)
            query_limit = None if name.startswith("costs") else PAGE_QUERIES
            ok = timed.p50_ms <= limit and (query_limit is None or queries <= query_limit)
            if not ok:
                missed.append(name)
            target = f"<= {limit:.0f} ms" + (f", <= {query_limit} queries" if query_limit else "")
            print(f"{name:<26} {timed.p50_ms:>8.1f} {timed.p90_ms:>8.1f} {timed.cpu_ms:>8.1f} {queries:>8}  "
                  f"{target}: {'ok' if ok else 'MISSED'}", flush=True)
            if args.queries:
                for statement in sql:
                    print(f"    {statement[:300]}")
            figures[f"{name}: CPU ms per page"] = timed.cpu_ms
    print("  (server time through the whole request stack in process; CPU ms: the median CPU time of "
          "this process per request, SQLite's included)")
    _measure.record("pages", figures)
    print("\nverdict:", "all targets met" if not missed else f"missed: {', '.join(missed)}")
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
