"""The chaos suite's counting: duplicates, repeated tool runs, ledger drift, the targets, and the
fake model's script. Fast: the database ones run one demo turn."""

from __future__ import annotations

from datetime import date

import pytest
from django.db.models import F

from tests.chaos import measures
from tests.chaos.collect import hand_backs, handed_off_after
from tests.chaos.model_server import FakeModelServer, turn_position
from tests.members import member_of


def test_a_step_key_stored_twice_in_one_trace_is_a_duplicate():
    rows = [(1, "llm:1:1"), (1, "tool:1:call_a"), (1, "tool:1:call_a"), (2, "tool:1:call_a"),
            (2, ""), (2, "")]
    assert measures.duplicate_step_keys(rows) == {(1, "tool:1:call_a"): 2}


def test_a_tool_run_after_its_result_was_recorded_is_a_duplicate_and_a_cut_off_one_is_not():
    executions = {
        "once": [10.0],
        "cut_off_then_rerun": [10.0, 20.0],  # the first run's worker died before recording it
        "rerun_after_result": [10.0, 30.0],
        "never_recorded": [10.0, 11.0],
    }
    recorded = {"once": 12.0, "cut_off_then_rerun": 22.0, "rerun_after_result": 12.0}
    runs = measures.tool_runs(executions, recorded)
    assert (runs.executions, runs.duplicates, runs.reruns) == (7, 1, 2)
    assert runs.duplicated_keys == ("rerun_after_result",)


def test_ledger_drift_names_each_amount_that_differs_and_ignores_zero_rows():
    day = date(2026, 1, 1)
    expected = {(1, day, "a"): {"calls": 2, "cost_units": 500}, (1, day, "b"): {"calls": 1}}
    actual = {(1, day, "a"): {"calls": 2, "cost_units": 499}, (1, day, "c"): {"calls": 0}}
    drift = measures.ledger_drift(expected, actual)
    assert [(d.key[2], d.field, d.expected, d.actual) for d in drift] == [
        ("a", "cost_units", 500, 499), ("b", "calls", 1, 0)]
    assert measures.ledger_drift(expected, {k: dict(v) for k, v in expected.items()}) == []


def test_summary_counts_what_never_happened_apart():
    assert measures.summary([4.0, 2.0, None, 9.0]) == {"n": 3, "missing": 1, "p50": 4.0, "max": 9.0}
    assert measures.summary([]) == {"n": 0, "missing": 0, "p50": None, "max": None}


def test_the_first_hand_back_after_a_kill_is_found_in_the_trace_or_its_resume_steps():
    meta = {"resume": {"reason": "worker_lost", "handed_back_at": "2026-01-01T00:00:30+00:00"}}
    steps = [{"meta": {"handed_back_at": "2026-01-01T00:00:05+00:00", "reason": "handoff"}}]
    backs = hand_backs(meta, steps)
    assert [reason for _, reason in backs] == ["handoff", "worker_lost"]
    kill = backs[0][0] - 3
    assert measures.first_at_or_after([at for at, _ in backs], kill) == backs[0][0]


def test_a_handoff_counts_when_a_resume_step_or_the_last_hand_back_says_so_after_the_stop():
    from datetime import UTC, datetime

    stop = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC).timestamp()
    later = {"resume": {"reason": "worker_lost", "handed_back_at": "2026-01-01T00:00:40+00:00"}}
    step = {"started_at": datetime(2026, 1, 1, 0, 0, 12, tzinfo=UTC), "meta": {"reason": "handoff"}}
    assert handed_off_after(later, [step], stop)
    assert not handed_off_after(later, [], stop)
    assert handed_off_after({"resume": {"reason": "handoff",
                                        "handed_back_at": "2026-01-01T00:00:11+00:00"}}, [], stop)
    assert not handed_off_after({}, [step], stop + 5)


def _figures(**changes):
    figures = {
        "turns": {"stuck": 0},
        "integrity": {"duplicate_steps": 0, "duplicate_tool_runs": 0, "lost_messages": 0,
                      "rollup_drift": 0, "trace_total_drift": 0},
        "killed": {"events": 3, "turns": 20, "completed_pct": 100.0,
                   "detection_s": {"n": 20, "missing": 0, "p50": 3.0, "max": 8.0}},
        "redis": {"worker_exits": 0, "start_after_return_s": {"n": 1, "missing": 0, "p50": 1.0, "max": 1.0}},
    }
    for path, value in changes.items():
        section, name = path.split("__")
        figures[section][name] = value
    return figures


def test_every_target_met_misses_nothing():
    assert measures.targets_missed(_figures()) == []


@pytest.mark.parametrize(("change", "words"), [
    ({"turns__stuck": 1}, "stuck"),
    ({"integrity__duplicate_tool_runs": 2}, "tool run"),
    ({"integrity__trace_total_drift": 1}, "drift"),
    ({"killed__completed_pct": 94.9}, "killed turns completed"),
    ({"killed__turns": 0}, "nothing was measured"),
    ({"killed__detection_s": {"n": 20, "missing": 0, "p50": 5.5, "max": 8.0}}, "detection median"),
    ({"killed__detection_s": {"n": 19, "missing": 1, "p50": 3.0, "max": 8.0}}, "never handed back"),
    ({"redis__worker_exits": 1}, "worker exit"),
    ({"redis__start_after_return_s": {"n": 1, "missing": 0, "p50": 6.0, "max": 6.0}}, "started 6.0 s"),
])
def test_each_target_missed_is_said(change, words):
    missed = measures.targets_missed(_figures(**change))
    assert len(missed) == 1 and words in missed[0], missed


def test_the_fake_model_knows_a_turns_step_from_its_messages_and_replays_faults_by_seed():
    messages = [{"role": "system", "content": "x"},
                {"role": "user", "content": "an older turn [chaos:old]"},
                {"role": "user", "content": [{"type": "text", "text": "go [chaos:abc]"}]},
                {"role": "assistant", "content": "", "tool_calls": []},
                {"role": "tool", "tool_call_id": "call_abc_1", "content": "{}"}]
    assert turn_position(messages) == ("abc", 1)
    plays = []
    server = FakeModelServer(seed=7)
    try:
        server.results_arrived(messages)
        first = server.results_seen["call_abc_1"]
        server.results_arrived(messages)
        assert server.results_seen == {"call_abc_1": first}  # the first moment it was known
    finally:
        server.server_close()
    for _ in range(2):
        server = FakeModelServer(seed=7, fault_rate=0.5)
        try:
            plays.append([server.fault_for(f"t{n}", 0, faulty=True) for n in range(40)])
        finally:
            server.server_close()
    assert plays[0] == plays[1] and len(set(plays[0])) > 2


@pytest.mark.django_db(transaction=True)
def test_the_ledger_check_finds_a_roll_up_or_trace_total_that_drifted(make_agent, alice, sent_turns,
                                                                     use_redis):
    from agents.chat.services import conversation_create
    from tests.chaos.collect import integrity_figures
    from tests.traces.cost_helpers import priced_demo, run
    from traces.models import CostRollup, Trace

    agent = make_agent()
    priced_demo(agent.team)
    trace = run(conversation_create(agent=agent, membership=member_of(alice, agent.team)), alice, "What is 6 * 7?")
    assert trace.status == "completed" and trace.cost_usd > 0
    clean = integrity_figures({}, {})
    assert (clean["rollup_drift"], clean["trace_total_drift"], clean["duplicate_steps"]) == (0, 0, 0)

    CostRollup.objects.update(cost_units=F("cost_units") + 1)
    Trace.objects.filter(pk=trace.pk).update(output_tokens=F("output_tokens") + 1)
    drifted = integrity_figures({}, {})
    assert drifted["rollup_drift"] == 1 and "cost_units" in drifted["rollup_drift_rows"][0]
    assert drifted["trace_total_drift"] == 1


def test_a_run_that_made_fewer_faults_than_planned_misses_its_target():
    figures = _figures()
    figures["injections"] = {"redis_restarts": {"planned": 1, "injected": 0},
                             "kills": {"planned": 5, "injected": 5}}
    figures["redis_freeze"] = {"messages_while_frozen": [{"send_s": 7.5, "accepted": True}],
                               "worker_exits": 0, "in_flight_failed": 0}
    figures["db_drop"] = {"failed_internal": [12]}
    missed = " | ".join(measures.targets_missed(figures))
    assert "redis restarts: 0 of 1 injected" in missed and "kills" not in missed
    assert "answered after 7.5 s" in missed
    assert "1 turn(s) failed by a dropped database connection" in missed
