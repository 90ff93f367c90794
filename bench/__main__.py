"""Run every shipped benchmark in turn (``make bench``); ``--check`` fails on a missed target.

    python -m bench [--check] [name ...]

Names: loop (loop overhead vs LangGraph), turns (50 concurrent turns in one worker),
live (step committed -> websocket frame), inspector (big traces), chat (send -> first token
painted in a real browser), costs (the costs page over 1,000,000 steps), mcp (an MCP tool call
over HTTP and stdio vs a built-in tool, and discovery of a 200-tool server), hostile (a megabyte
of hostile model output through the parser, sanitizer and scrubbers; hostile routing patterns),
api (200 streaming completions at once through the OpenAI-compatible API, beside the chat's path),
compare (the compare page for two 10,000-step traces that differ at step 7,000).
"""

from __future__ import annotations

import importlib
import subprocess
import sys

BENCHES = {
    "loop": "bench.loop_overhead",
    "turns": "bench.turns_concurrency",
    "live": "bench.live_latency",
    "inspector": "bench.inspector",
    "chat": "bench.chat_latency",
    "costs": "bench.costs",
    "mcp": "bench.mcp_overhead",
    "hostile": "bench.hostile_input",
    "api": "bench.api_latency",
    "otel": "bench.otel_export",
    "compare": "bench.compare",
    "fork": "bench.fork",
}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    names = [a for a in argv if not a.startswith("-")] or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
        return 2
    failed = []
    for name in names:
        module = BENCHES[name]
        if importlib.util.find_spec(module) is None:
            print(f"== {name}: not available")
            continue
        print(f"\n== {name} ({module})", flush=True)
        # Each in its own process: they configure Django and event loops differently.
        code = subprocess.call([sys.executable, "-m", module, *(["--check"] if check else [])])  # noqa: S603
        if code:
            failed.append(name)
    if failed:
        print(f"\nmissed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
