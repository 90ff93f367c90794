"""Loop overhead per tool iteration: our ``run_turn`` next to LangGraph's ``create_react_agent``.

Both run the same work in the same process: a model with zero latency asks for a no-op tool N
times (N = 1, 10, 50), then answers. Ours uses the demo provider ("call the noop tool N times");
LangGraph gets a fake chat model that makes the same calls. What is measured is everything else:
the loop, its bookkeeping, events, history handling.

    python -m bench.loop_overhead            # print the table
    python -m bench.loop_overhead --check    # and exit 1 if a target is missed

Targets: ours <= LangGraph per iteration at every size, and ours is flat as history grows
(per-iteration cost at 50 iterations <= 2x that at 10). LangGraph is not part of the default
install; without it only our numbers are shown (install the ``bench`` extra to compare).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from agents.runtime.events import Event
from agents.runtime.loop import TurnConfig, TurnStatus, run_turn
from agents.runtime.providers.demo import DemoProvider
from agents.runtime.tools import FunctionTool
from bench import _measure, _profile

SIZES = (1, 10, 50)
# Turns measured per size; more for short turns so each size takes a similar time.
RUNS = {1: 300, 10: 60, 50: 16}
WARMUP = 3
FLATNESS_LIMIT = 2.0
INSTALL_HINT = (
    "LangGraph is not installed, so only our numbers are shown. To compare, install the bench "
    "extra in a separate virtualenv:\n"
    "    python3 -m venv /tmp/benchvenv && /tmp/benchvenv/bin/pip install -e '.[bench]'\n"
    "    /tmp/benchvenv/bin/python -m bench.loop_overhead")

TurnRunner = Callable[[int], Awaitable[None]]


class CountingObserver:
    """A stand-in for the recorder: sees every event, keeps a count."""

    def __init__(self) -> None:
        self.count = 0

    async def emit(self, event: Event) -> None:
        self.count += 1


_calls = iter(range(1, 1 << 62))


async def _noop(arguments: dict[str, Any]) -> str:
    # A fresh output each time: identical outputs would (rightly) trip our loop detector.
    return f"ok {next(_calls)}"


def ours() -> TurnRunner:
    provider = DemoProvider()
    tools = [FunctionTool("noop", "Does nothing.", _noop)]

    async def run(iterations: int) -> None:
        result = await run_turn(
            provider=provider,
            config=TurnConfig(model="demo", system_prompt="You are a benchmark.",
                              max_tool_iterations=iterations + 1),
            history=[], user_message=f"call the noop tool {iterations} times", tools=tools,
            observer=CountingObserver())
        if result.status is not TurnStatus.COMPLETED or result.iterations != iterations + 1:
            raise RuntimeError(f"unexpected turn: {result.status} {result.error} {result.iterations}")

    return run


def langgraph() -> TurnRunner | None:
    try:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.tools import tool
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent
    except ImportError:
        return None

    class FakeToolCallingModel(BaseChatModel):
        """Calls ``noop`` until the conversation holds ``iterations`` results, then answers."""

        iterations: int = 1

        @property
        def _llm_type(self) -> str:
            return "fake-tool-calling"

        def _reply(self, messages: list[BaseMessage]) -> ChatResult:
            done = sum(1 for m in messages if isinstance(m, ToolMessage))
            if done < self.iterations:
                message = AIMessage(content="", tool_calls=[
                    {"name": "noop", "args": {}, "id": f"call_{done + 1}", "type": "tool_call"}])
            else:
                message = AIMessage(content=f"Called noop {self.iterations} times.")
            return ChatResult(generations=[ChatGeneration(message=message)])

        def _generate(self, messages: list[BaseMessage], stop: Any = None,
                      run_manager: Any = None, **kwargs: Any) -> ChatResult:
            return self._reply(messages)

        async def _agenerate(self, messages: list[BaseMessage], stop: Any = None,
                             run_manager: Any = None, **kwargs: Any) -> ChatResult:
            return self._reply(messages)

        def bind_tools(self, tools: Any, **kwargs: Any) -> FakeToolCallingModel:
            return self

    @tool
    async def noop() -> str:
        """Does nothing."""
        return f"ok {next(_calls)}"

    agents: dict[int, Any] = {}

    async def run(iterations: int) -> None:
        agent = agents.get(iterations)
        if agent is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                agent = create_react_agent(FakeToolCallingModel(iterations=iterations), [noop],
                                           prompt="You are a benchmark.")
            agents[iterations] = agent
        state = await agent.ainvoke(
            {"messages": [("user", f"call the noop tool {iterations} times")]},
            config={"recursion_limit": 2 * iterations + 10})
        tool_results = sum(1 for m in state["messages"] if isinstance(m, ToolMessage))
        if tool_results != iterations:
            raise RuntimeError(f"unexpected LangGraph run: {tool_results} tool results")

    return run


# CPU µs per tool iteration (this process's CPU over the measured turns), by size.
CPU: dict[str, dict[int, float]] = {"ours": {}, "langgraph": {}}


async def measure(runner: TurnRunner, iterations: int, runs: int, name: str = "ours") -> float:
    """Median microseconds per tool iteration over ``runs`` turns; the CPU per iteration goes
    into ``CPU[name]``."""
    for _ in range(WARMUP):
        await runner(iterations)
    gc.collect()
    samples = []
    cpu_started = time.process_time_ns()
    for _ in range(runs):
        started = time.perf_counter_ns()
        await runner(iterations)
        samples.append((time.perf_counter_ns() - started) / 1000 / iterations)
    CPU[name][iterations] = (time.process_time_ns() - cpu_started) / 1000 / iterations / runs
    return statistics.median(samples)


async def collect(scale: float) -> tuple[dict[int, float], dict[int, float] | None]:
    runs = {n: max(int(RUNS.get(n, 10) * scale), 3) for n in SIZES}
    mine = ours()
    theirs = langgraph()
    our_numbers: dict[int, float] = {}
    their_numbers: dict[int, float] | None = {} if theirs is not None else None
    for size in SIZES:
        our_numbers[size] = await measure(mine, size, runs[size])
        if theirs is not None and their_numbers is not None:
            their_numbers[size] = await measure(theirs, size, runs[size], "langgraph")
    return our_numbers, their_numbers


def report(our: dict[int, float], their: dict[int, float] | None) -> list[str]:
    """Prints the table; returns the targets that were missed."""
    missed: list[str] = []
    print("Loop overhead per tool iteration (median µs; zero-latency model, no-op tool; "
          "CPU: this process's CPU µs per iteration over the measured turns)")
    if their is None:
        print(f"{'iterations':>10} {'ours':>10} {'ours CPU':>10}")
        for size in SIZES:
            print(f"{size:>10} {our[size]:>10.1f} {CPU['ours'][size]:>10.1f}")
    else:
        print(f"{'iterations':>10} {'ours':>10} {'langgraph':>10} {'ours/langgraph':>15} "
              f"{'ours CPU':>10} {'lg CPU':>10}")
        for size in SIZES:
            ratio = our[size] / their[size]
            print(f"{size:>10} {our[size]:>10.1f} {their[size]:>10.1f} {ratio:>15.2f} "
                  f"{CPU['ours'][size]:>10.1f} {CPU['langgraph'][size]:>10.1f}")
            if ratio > 1.0:
                missed.append(f"ours is slower than LangGraph at {size} iterations ({ratio:.2f}x)")
    flat = our[50] / our[10]
    line = f"Flatness, per-iteration cost at 50 vs 10 iterations: ours {flat:.2f}x"
    if their is not None:
        line += f", langgraph {their[50] / their[10]:.2f}x"
    print(line + f" (target <= {FLATNESS_LIMIT:.1f}x)")
    if flat > FLATNESS_LIMIT:
        missed.append(f"ours is not flat: 50 vs 10 iterations = {flat:.2f}x")
    if their is None:
        print(INSTALL_HINT)
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the number of measured turns (default 1.0)")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)
    _measure.print_machine()
    with _profile.profiled("loop", {"bench": os.getpid()}, args.profile):
        our, their = asyncio.run(collect(args.scale))
    missed = report(our, their)
    _measure.record("loop", {f"ours, {size} iteration{'s' if size > 1 else ''}: CPU µs per iteration": CPU["ours"][size]
                             for size in SIZES},
                    reference={f"LangGraph, {size} iteration{'s' if size > 1 else ''}: CPU µs per iteration": value
                               for size, value in CPU["langgraph"].items()})
    for problem in missed:
        print(f"TARGET MISSED: {problem}")
    if args.check and missed:
        return 1
    if args.check:
        print("All targets met." if their is not None else
              "Flatness target met (the LangGraph comparison needs the bench extra).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
