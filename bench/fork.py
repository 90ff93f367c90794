"""Fork and replay: how soon a fork of a long turn sends its first new model request.

A stored turn of 10,000 steps (5,000 iterations of a model request and the ``current_time`` call
it asked for, each with its recorded answer, arguments and result) is forked at step 5,000 (a
tool call), and the fork is run in this process on the offline demo model, as a worker thread
runs it. Measured: from the call to ``fork_start`` to the start of the fork's first new model
request (its step's ``started_at``), which includes storing the fork, claiming it, reading the
parent's record up to the fork point, building the runtime and replaying the call.

    python -m bench.fork            # print the figures
    python -m bench.fork --check    # and exit 1 if the target (300 ms) is missed
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta

from django.utils import timezone

from bench import _measure, _profile
from bench.world import bench_world  # configures Django on a scratch database: first

# isort: split
from agents.models import Agent, Message, Tool
from agents.runtime.builtin import CurrentTimeTool
from agents.runtime.messages import Message as RuntimeMessage
from agents.runtime.messages import TextBlock, ToolUseBlock
from agents.turns.fork import fork_start
from agents.turns.tasks import turn_run
from agentsite.celery import app
from traces.models import Step, StepPayload, Trace

STEPS = 10_000
FORK_AT = 5_000
RUNS = int(os.environ.get("BENCH_FORK_RUNS", "5"))
TARGET_MS = 300.0


def _long_trace(*, conversation, user, agent):
    now = timezone.now()
    text = "call the current_time tool 5000 times"
    message = Message.objects.create(conversation=conversation, role="user", text=text,
                                     blocks=RuntimeMessage.user(text).to_dict()["blocks"], author=user)
    trace = Trace.objects.create(team=conversation.team, conversation=conversation, agent=agent,
                                 agent_version=agent.version, user=user, user_message=message,
                                 status="completed", started_at=now, finished_at=now,
                                 model="demo", provider_name=agent.provider.name, provider_kind="demo")
    steps, payloads = [], []
    for i in range(1, STEPS // 2 + 1):
        call_id = f"call_{i}"
        answer = RuntimeMessage("assistant", [TextBlock(""), ToolUseBlock(call_id, "current_time", {})])
        at = now + timedelta(milliseconds=i)
        steps.append(Step(trace=trace, seq=2 * i - 1, kind="llm_request", name="demo", iteration=i,
                          status="ok", success=True, started_at=at, model="demo",
                          provider=agent.provider.name, input_tokens=100, output_tokens=10,
                          meta={"tool_calls": ["current_time"]}))
        steps.append(Step(trace=trace, seq=2 * i, kind="tool_call", name="current_time", iteration=i,
                          status="ok", success=True, started_at=at, call_id=call_id,
                          meta={"permission": {"policy": "allow", "outcome": "allow", "source": "tool"}}))
        payloads.append((2 * i - 1, "message", json.dumps(answer.to_dict())))
        payloads.append((2 * i - 1, "request", json.dumps({"model": "demo", "messages": ["…" * 200]})))
        payloads.append((2 * i, "arguments", "{}"))
        payloads.append((2 * i, "output", f"2026-01-01T00:00:{i % 60:02d}Z (UTC)"))
    Step.objects.bulk_create(steps, batch_size=2_000)
    ids = dict(Step.objects.filter(trace=trace).values_list("seq", "pk"))
    StepPayload.objects.bulk_create([StepPayload(step_id=ids[seq], kind=kind, content=content,
                                                 size=len(content)) for seq, kind, content in payloads],
                                    batch_size=2_000)
    Trace.objects.filter(pk=trace.pk).update(step_count=STEPS, iterations=STEPS // 2)
    return Trace.objects.select_related("conversation", "user_message", "agent").get(pk=trace.pk)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)

    app.send_task = lambda *a, **k: None  # the fork is run here, not by a worker
    world = bench_world()
    team, user, conversation = world.team, world.user, world.conversation
    membership = world.membership
    agent = world.agent
    Agent.objects.filter(pk=agent.pk).update(history_max_messages=50)
    agent.tools.add(Tool.objects.create(team=team, name="current_time", kind="builtin",
                                        description=CurrentTimeTool.description,
                                        parameters=CurrentTimeTool.parameters))
    # The fork takes up iteration 2,500 and then has to answer: its one new request.
    Agent.objects.filter(pk=agent.pk).update(max_tool_iterations=FORK_AT // 2)
    agent.refresh_from_db()
    started = time.perf_counter()
    parent = _long_trace(conversation=conversation, user=user, agent=agent)
    print(f"a stored turn of {STEPS:,} steps made in {time.perf_counter() - started:.1f} s")

    firsts, totals, cpus = [], [], []
    with _profile.profiled("fork", {"bench": os.getpid()}, args.profile):
        for _ in range(RUNS):
            begun = timezone.now()
            t0, cpu0 = time.perf_counter(), time.process_time()
            fork = fork_start(trace=parent, seq=FORK_AT, membership=membership)
            queued = (time.perf_counter() - t0) * 1000
            status = turn_run(fork.pk)
            totals.append((time.perf_counter() - t0) * 1000)
            cpus.append((time.process_time() - cpu0) * 1000)
            first = Step.objects.filter(trace=fork, kind="llm_request").order_by("seq").first()
            assert status == "completed" and first is not None, status
            replayed = Step.objects.get(trace=fork, kind="tool_call")
            assert replayed.meta.get("replayed"), replayed.meta
            firsts.append((first.started_at - begun).total_seconds() * 1000)
            print(f"  fork stored and queued in {queued:.0f} ms; first new model request after "
                  f"{firsts[-1]:.0f} ms; run over after {totals[-1]:.0f} ms, {cpus[-1]:.0f} ms of CPU")
    p50 = statistics.median(firsts)
    _measure.record("fork", {"CPU ms per fork (stored, queued and run)": statistics.median(cpus)})
    print(f"fork at step {FORK_AT:,} of {STEPS:,}: first new model request p50 {p50:.0f} ms, "
          f"worst {max(firsts):.0f} ms (target {TARGET_MS:.0f} ms)")
    return 1 if args.check and p50 > TARGET_MS else 0


if __name__ == "__main__":
    sys.exit(main())
