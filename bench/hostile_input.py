"""Untrusted text at its worst: a megabyte of hostile model output through the parser, the
reply sanitizer and the credential scrubbers, and hostile routing patterns on long messages.

    python -m bench.hostile_input            # print the table
    python -m bench.hostile_input --check    # and exit 1 if a target is missed

Targets: each megabyte is handled in <= 1 s (median of 3), each hostile pattern in <= 0.5 s,
in routing and in tool-argument validation. The unit tests check what these inputs give; how
fast, only here, where a busy machine cannot fail the build (a super-linear scan of one of them
takes minutes to days).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

from agents.runtime.parsing import parse_tool_calls
from agents.runtime.routing import RoutingRule, classify
from agents.runtime.sanitize import sanitize_response
from agents.runtime.scrub import redact_leaks, scrub_credentials, scrub_secrets
from bench import _django, _measure, _profile

MEGABYTE = 1_000_000
RUNS = 3
MEGABYTE_TARGET_S = 1.0
PATTERN_TARGET_S = 0.5


def repeat(unit: str) -> str:
    return (unit * (MEGABYTE // len(unit) + 1))[:MEGABYTE]


def _scrub(text: str) -> None:
    scrub_credentials(text)
    redact_leaks(text)
    scrub_secrets(text)


TEXTS = {
    "tool_call": repeat("<tool_call>"),
    "tool_call+brace": repeat("<tool_call>{"),
    "braces": repeat("{"),
    "balanced_deep": "[" * 500_000 + "]" * 500_000,
    "object_chain": repeat('{"a":'),
    "invoke_name": repeat('<invoke name="'),
    "invoke_closed": repeat('<invoke name="x" ') + "</invoke>",
    "brackets": repeat("["),
    "strings_in_brackets": repeat('["[[[["'),
    "tools": repeat("<tools>"),
    "fences": repeat("```tool_call\n"),
    "perl": repeat("TOOL_CALL {"),
    "think": repeat("<think>"),
    "xml_tags": repeat("<t>"),
    "tool_result": repeat("<tool_result>"),
    "json_lines": repeat('[{"name":"shell","arguments":{}}]\n'),
    "eyJ": repeat("eyJ"),
    "mysql": repeat("mysql://"),
    "token_quote": repeat('token="'),
    "openai_like": repeat("sk-" + "a" * 30 + "T3Blbk"),
    "private_key": repeat("-----BEGIN PRIVATE KEY-----"),
    "bearer": "Authorization: " + repeat("Bearer "),
    "jwt_like": repeat("eyJa.eyJb."),
    "db_url_like": repeat("postgres://a:b"),
    "password=": repeat("password="),
    "real_calls": repeat('<tool_call>{"name":"a","arguments":{"i":1}}</tool_call>\n'),
}
STAGES: dict[str, Callable[[str], object]] = {
    "parse": parse_tool_calls,
    "sanitize": lambda text: sanitize_response(text, ["shell"]),
    "scrub": _scrub,
}
PATTERNS = [
    ("(a|a)*b", "a" * 100_000),
    ("(a+)+$", "a" * 100_000 + "!"),
    ("(.*a){20}", "a" * 30_000),
    (r"^(\w+\s?)*$", "word " * 20_000 + "!"),
    ("(a|aa)*b", "a" * 100_000),
    (r"\s*\s*x", " " * 1_000_000),
]


CPU_S: dict[str, float] = {}  # CPU seconds by stage (and "routing"), summed over the inputs


def _median_s(fn: Callable[[], object], stage: str = "") -> float:
    times = []
    cpu = time.process_time()
    for _ in range(RUNS):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    CPU_S[stage] = CPU_S.get(stage, 0.0) + (time.process_time() - cpu) / RUNS
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    _profile.add_profile_argument(parser)
    args = parser.parse_args()
    _django.setup_django(migrate=False)  # tool-argument validation lives in a Django app
    with _profile.profiled("hostile", {"bench": os.getpid()}, args.profile):
        ok = run()
    per_mb = {stage: CPU_S[stage] / len(TEXTS) * 1000 for stage in STAGES}
    print("CPU per megabyte, mean over the inputs: "
          + ", ".join(f"{stage} {ms:.0f} ms" for stage, ms in per_mb.items())
          + f"; routing: {CPU_S['routing'] / len(PATTERNS) * 1000:.0f} ms per pattern")
    _measure.record("hostile", {f"{stage}: CPU ms per megabyte": ms for stage, ms in per_mb.items()})
    print("\nverdict:", "all targets met" if ok else "a target was missed")
    return 0 if ok or not args.check else 1


def run() -> bool:
    ok = True
    print(f"{'input (1 MB)':<18}" + "".join(f"{stage:>12}" for stage in STAGES) + f"   target <= {MEGABYTE_TARGET_S:g} s")
    for name, text in TEXTS.items():
        cells = []
        for stage, fn in STAGES.items():
            seconds = _median_s(lambda fn=fn, text=text: fn(text), stage)
            ok &= seconds <= MEGABYTE_TARGET_S
            cells.append(f"{seconds * 1000:>9.0f} ms" + ("" if seconds <= MEGABYTE_TARGET_S else "!"))
        print(f"{name:<18}" + "".join(f"{c:>12}" for c in cells))
    print(f"\n{'routing pattern':<18} {'input':>10} {'median':>10}   target <= {PATTERN_TARGET_S:g} s")
    for pattern, text in PATTERNS:
        rule = RoutingRule(hint="slow", patterns=(pattern,))
        seconds = _median_s(lambda rule=rule, text=text: classify(text, [rule]), "routing")
        ok &= seconds <= PATTERN_TARGET_S
        print(f"{pattern:<18} {len(text):>10,} {seconds * 1000:>7.1f} ms  {'ok' if seconds <= PATTERN_TARGET_S else 'MISSED'}")
    # Imported once Django is set up (main does that first): the tools package loads the models.
    from agents.tools.validation import ArgumentsValidator, argument_problem

    print(f"\n{'argument pattern':<18} {'input':>10} {'median':>10}   target <= {PATTERN_TARGET_S:g} s")
    for pattern, text in PATTERNS:
        schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": pattern}},
                  "patternProperties": {pattern: {"type": "string"}}, "additionalProperties": False}
        validator = ArgumentsValidator(schema)
        arguments = {"q": text, text[:5000]: "x"}
        seconds = _median_s(lambda v=validator, a=arguments: argument_problem(v, a), "arguments")
        ok &= seconds <= PATTERN_TARGET_S
        print(f"{pattern:<18} {len(text):>10,} {seconds * 1000:>7.1f} ms  {'ok' if seconds <= PATTERN_TARGET_S else 'MISSED'}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
