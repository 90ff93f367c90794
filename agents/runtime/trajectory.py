"""Trajectory states: a structured account of where a turn stands after each tool iteration.

``build_trajectory_state`` is deterministic and makes no model call. It reads the previous state,
the turn's objective (the user's message), the assistant text of the iteration, the tool calls the
model made and their (already scrubbed) results. The fields are derived as follows:

* ``objective``     -- the user's message for this turn, whitespace-collapsed, at most 300 chars.
                       It is the same for every iteration of a turn.
* ``evidence``      -- one line per *successful* tool result, ``"{tool}: {first line of output}"``
                       (160 chars at most), appended to the previous state's evidence; the newest
                       ``MAX_ITEMS`` are kept and duplicates are dropped.
* ``uncertainties`` -- sentences of this iteration's assistant text that ask a question or hedge
                       (``HEDGES``), plus one line per call the user denied or that timed out
                       ("not known: ..."), newest ``MAX_ITEMS``. Only this iteration counts:
                       an uncertainty the model stopped voicing is considered resolved.
* ``failures``      -- one line per *failed* tool result, ``"{tool}: {first line of output}"``,
                       appended to the previous failures; a later success of the same tool
                       removes that tool's earlier failures. Newest ``MAX_ITEMS`` kept.
* ``next_plan``     -- if this iteration had failures: retry or work around them; if a person
                       declined a call (or no one approved it in time): respect that and go on
                       without it, never retry it. Otherwise the
                       last sentence of the assistant text that announces a step (``PLAN_CUES``),
                       else "Use the results of {tools} to continue toward the objective."
* ``tool_calls``    -- this iteration's calls in call order: ``{id, name, arguments, success}``,
                       where ``arguments`` is compact JSON cut to 200 chars.

``changed_fields`` names the fields that differ from the previous state; the loop reports them in
the ``TrajectoryStateRecorded`` event. ``trajectory_state_prompt_block`` renders a state for the
system prompt of the next request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

MAX_ITEMS = 8
ITEM_CHARS = 160
OBJECTIVE_CHARS = 300
ARGUMENTS_CHARS = 200
HEDGES = (
    "not sure", "unsure", "unclear", "uncertain", "unknown", "might", "may be", "maybe",
    "possibly", "perhaps", "probably", "seems", "appears", "assume", "verify", "need to check",
    "not certain", "could not", "couldn't", "can't tell",
)
PLAN_CUES = ("next", "then", "i will", "i'll", "let me", "now ", "going to", "plan", "need to")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WS = re.compile(r"\s+")
# A call a person declined (or that no one approved in time) did not fail: it must not be
# retried. ``approvals.declined_output`` writes these; they are told apart from failures here.
DECLINED_PREFIXES = ("Declined by ", "Not approved", "Denied by user.")
_DENIED_PREFIXES = (*DECLINED_PREFIXES, "Error: tool '")


@dataclass(slots=True)
class ToolCallSummary:
    id: str
    name: str
    arguments: str
    success: bool


@dataclass(slots=True)
class TrajectoryState:
    iteration: int
    objective: str
    evidence: list[str] = field(default_factory=list)
    uncertainties: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    next_plan: str = ""
    tool_calls: list[ToolCallSummary] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "objective": self.objective,
            "evidence": list(self.evidence),
            "uncertainties": list(self.uncertainties),
            "failures": list(self.failures),
            "next_plan": self.next_plan,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments,
                            "success": c.success} for c in self.tool_calls],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrajectoryState:
        calls = [
            ToolCallSummary(
                id=str(c.get("id", "")), name=str(c.get("name", "")),
                arguments=str(c.get("arguments", "")), success=bool(c.get("success", False)),
            )
            for c in data.get("tool_calls") or [] if isinstance(c, dict)
        ]
        return cls(
            iteration=int(data.get("iteration") or 0),
            objective=str(data.get("objective") or ""),
            evidence=[str(x) for x in data.get("evidence") or []],
            uncertainties=[str(x) for x in data.get("uncertainties") or []],
            failures=[str(x) for x in data.get("failures") or []],
            next_plan=str(data.get("next_plan") or ""),
            tool_calls=calls,
        )


@dataclass(frozen=True, slots=True)
class ObservedCall:
    """One call of an iteration and its outcome, as the loop hands it to the builder."""

    id: str
    name: str
    arguments: Any
    output: str
    success: bool


def _clip(text: str, limit: int) -> str:
    text = _WS.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    return ""


def _arguments_json(arguments: Any) -> str:
    try:
        text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        text = str(arguments)
    return text if len(text) <= ARGUMENTS_CHARS else text[: ARGUMENTS_CHARS - 1] + "…"


def _newest_unique(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    kept: list[str] = []
    for item in reversed(list(items)):
        if item and item not in seen:
            seen.add(item)
            kept.append(item)
        if len(kept) == MAX_ITEMS:
            break
    kept.reverse()
    return kept


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def _is_hedge(sentence: str) -> bool:
    lowered = sentence.lower()
    return sentence.endswith("?") or any(h in lowered for h in HEDGES)


def _is_plan(sentence: str) -> bool:
    lowered = sentence.lower()
    return any(cue in lowered for cue in PLAN_CUES)


def _outcome_line(call: ObservedCall) -> str:
    return _clip(f"{call.name}: {_first_line(call.output)}", ITEM_CHARS)


def build_trajectory_state(
    *,
    iteration: int,
    objective: str,
    assistant_text: str,
    calls: Sequence[ObservedCall],
    previous: TrajectoryState | None = None,
) -> TrajectoryState:
    """The state after ``iteration``; see the module docstring for how each field is derived."""
    succeeded = [c for c in calls if c.success]
    failed = [c for c in calls if not c.success]

    evidence = list(previous.evidence) if previous else []
    evidence.extend(_outcome_line(c) for c in succeeded)

    recovered = tuple(f"{c.name}: " for c in succeeded)
    failures = [f for f in (previous.failures if previous else [])
                if not (recovered and f.startswith(recovered))]
    failures.extend(_outcome_line(c) for c in failed if not _declined(c))

    sentences = _sentences(assistant_text)
    uncertainties = [_clip(s, ITEM_CHARS) for s in sentences if _is_hedge(s)]
    uncertainties.extend(
        _clip(f"not known: {c.name} did not run ({_first_line(c.output)})", ITEM_CHARS)
        for c in failed if c.output.startswith(_DENIED_PREFIXES)
    )

    return TrajectoryState(
        iteration=iteration,
        objective=_clip(objective, OBJECTIVE_CHARS),
        evidence=_newest_unique(evidence),
        uncertainties=_newest_unique(uncertainties),
        failures=_newest_unique(failures),
        next_plan=_next_plan(sentences, succeeded, failed),
        tool_calls=[ToolCallSummary(c.id, c.name, _arguments_json(c.arguments), c.success)
                    for c in calls],
    )


def _declined(call: ObservedCall) -> bool:
    return call.output.startswith(DECLINED_PREFIXES)


def _next_plan(sentences: list[str], succeeded: Sequence[ObservedCall],
               failed: Sequence[ObservedCall]) -> str:
    broken = [c for c in failed if not _declined(c)]
    if broken:
        names = ", ".join(dict.fromkeys(c.name for c in broken))
        return f"Retry or work around the failed call(s) to {names}, then continue toward the objective."
    if failed:
        names = ", ".join(dict.fromkeys(c.name for c in failed))
        return (f"Do not call {names} again: the call was not approved. Answer with what is "
                "known, or ask the person how to go on.")
    for sentence in reversed(sentences):
        if _is_plan(sentence):
            return _clip(sentence, ITEM_CHARS)
    names = ", ".join(dict.fromkeys(c.name for c in succeeded))
    if names:
        return f"Use the results of {names} to continue toward the objective."
    return "Answer the objective."


_COMPARED = tuple(f.name for f in fields(TrajectoryState) if f.name != "iteration")


def changed_fields(state: TrajectoryState, previous: TrajectoryState | None) -> list[str]:
    if previous is None:
        return list(_COMPARED)
    return [n for n in _COMPARED if getattr(state, n) != getattr(previous, n)]


def _section(title: str, items: list[str]) -> list[str]:
    if not items:
        return [f"{title}: none"]
    return [f"{title}:", *(f"- {item}" for item in items)]


def trajectory_state_prompt_block(state: TrajectoryState, *, title: str = "Trajectory state") -> str:
    lines = [f"## {title} (after tool iteration {state.iteration})", f"Objective: {state.objective}"]
    lines += _section("Evidence", state.evidence)
    lines += _section("Uncertainties", state.uncertainties)
    lines += _section("Failures", state.failures)
    lines.append(f"Next plan: {state.next_plan}")
    return "\n".join(lines)
