from __future__ import annotations

import pytest

from agents.runtime.trajectory import (
    MAX_ITEMS,
    ObservedCall,
    TrajectoryState,
    build_trajectory_state,
    changed_fields,
    trajectory_state_prompt_block,
)


def ok(name: str, output: str, arguments: object = None, call_id: str = "c") -> ObservedCall:
    return ObservedCall(call_id, name, arguments if arguments is not None else {}, output, True)


def failed(name: str, output: str, call_id: str = "c") -> ObservedCall:
    return ObservedCall(call_id, name, {}, output, False)


def test_the_first_state_collects_evidence_and_calls():
    state = build_trajectory_state(
        iteration=1, objective="  What is   the weather\nin Paris? ",
        assistant_text="I'll check the forecast.",
        calls=[ok("weather", "Sunny, 21 C\nwind 5 km/h", {"city": "Paris"}, "c1")])
    assert state.iteration == 1
    assert state.objective == "What is the weather in Paris?"
    assert state.evidence == ["weather: Sunny, 21 C"]
    assert state.failures == [] and state.uncertainties == []
    assert state.next_plan == "I'll check the forecast."
    assert state.to_dict()["tool_calls"] == [
        {"id": "c1", "name": "weather", "arguments": '{"city":"Paris"}', "success": True}]


def test_failures_set_the_plan_and_a_later_success_clears_them():
    first = build_trajectory_state(iteration=1, objective="o", assistant_text="",
                                   calls=[failed("fetch", "Error: HTTP 503")])
    assert first.failures == ["fetch: Error: HTTP 503"]
    assert first.next_plan.startswith("Retry or work around the failed call(s) to fetch")
    second = build_trajectory_state(iteration=2, objective="o", assistant_text="",
                                    calls=[ok("fetch", "<html>")], previous=first)
    assert second.failures == []
    assert second.evidence == ["fetch: <html>"]
    assert second.next_plan == "Use the results of fetch to continue toward the objective."


def test_uncertainties_come_from_hedges_questions_and_denials():
    state = build_trajectory_state(
        iteration=1, objective="o",
        assistant_text="The file might be stale. It has 3 lines. Is the path right?",
        calls=[failed("deploy", "Denied by user.")])
    assert state.uncertainties == [
        "The file might be stale.", "Is the path right?",
        "not known: deploy did not run (Denied by user.)"]


@pytest.mark.parametrize("output", [
    "Declined by a team admin.\nThe person chose not to let this call run.",
    "Not approved in time.\nNo one decided within the approval time limit.",
])
def test_a_declined_call_is_not_a_failure_to_retry(output):
    state = build_trajectory_state(iteration=1, objective="o", assistant_text="",
                                   calls=[failed("deploy", output), failed("fetch", "HTTP 500")])
    assert state.failures == ["fetch: HTTP 500"]
    assert state.next_plan.startswith("Retry or work around the failed call(s) to fetch,")
    alone = build_trajectory_state(iteration=1, objective="o", assistant_text="",
                                   calls=[failed("deploy", output)])
    assert alone.failures == [] and "Retry" not in alone.next_plan
    assert alone.next_plan.startswith("Do not call deploy again: the call was not approved.")
    assert alone.uncertainties == [f"not known: deploy did not run ({output.splitlines()[0]})"]


def test_uncertainties_are_not_carried_over():
    first = build_trajectory_state(iteration=1, objective="o", assistant_text="Maybe?",
                                   calls=[ok("a", "x")])
    second = build_trajectory_state(iteration=2, objective="o", assistant_text="Done.",
                                    calls=[ok("a", "y")], previous=first)
    assert first.uncertainties == ["Maybe?"] and second.uncertainties == []


def test_lists_keep_the_newest_unique_items():
    state = None
    for i in range(MAX_ITEMS + 3):
        state = build_trajectory_state(iteration=i + 1, objective="o", assistant_text="",
                                       calls=[ok("t", f"r{i}"), ok("t", f"r{i}")], previous=state)
    assert state is not None
    assert state.evidence == [f"t: r{i}" for i in range(3, MAX_ITEMS + 3)]


def test_long_items_are_clipped():
    state = build_trajectory_state(iteration=1, objective="x" * 1000, assistant_text="",
                                   calls=[ok("t", "y" * 1000, {"k": "z" * 1000})])
    assert len(state.objective) == 300 and state.objective.endswith("…")
    assert len(state.evidence[0]) == 160
    assert len(state.tool_calls[0].arguments) == 200


def test_derivation_is_deterministic():
    args = dict(iteration=1, objective="o", assistant_text="Next I will sum.",
                calls=[ok("a", "1"), failed("b", "Error: x")])
    assert build_trajectory_state(**args) == build_trajectory_state(**args)


def test_changed_fields_compares_with_the_previous_state():
    first = build_trajectory_state(iteration=1, objective="o", assistant_text="",
                                   calls=[ok("a", "1")])
    same = build_trajectory_state(iteration=2, objective="o", assistant_text="",
                                  calls=[ok("a", "1")], previous=first)
    assert changed_fields(first, None) == ["objective", "evidence", "uncertainties", "failures",
                                           "next_plan", "tool_calls"]
    assert changed_fields(same, first) == []


def test_the_prompt_block_lists_every_field():
    state = TrajectoryState(iteration=3, objective="find x", evidence=["a: 1"],
                            failures=["b: Error: no"], next_plan="try c")
    assert trajectory_state_prompt_block(state) == (
        "## Trajectory state (after tool iteration 3)\n"
        "Objective: find x\n"
        "Evidence:\n- a: 1\n"
        "Uncertainties: none\n"
        "Failures:\n- b: Error: no\n"
        "Next plan: try c")


def test_a_state_round_trips_through_a_dict():
    state = build_trajectory_state(iteration=1, objective="o", assistant_text="maybe",
                                   calls=[ok("a", "1", {"x": 1}, "id1")])
    assert TrajectoryState.from_dict(state.to_dict()) == state
    assert TrajectoryState.from_dict({}) == TrajectoryState(iteration=0, objective="")
