"""``make bench``'s comparison with the committed baseline: a baseline recorded on another
machine is scaled by the two machines' calibrations, so a slower machine is not a regression
and a regression on it still shows."""

from __future__ import annotations

import json

from bench import _measure

BASELINE = {"benches": {"turns": {"cpu": {"worker CPU ms per turn": 25.0}, "speed_ms": 20.0,
                                  "machine": "load average 0.50 0.50 0.50 (1, 5, 15 min), 2 CPUs",
                                  "args": []}}}


def test_a_slower_machine_is_not_a_regression_and_a_regression_on_it_still_is():
    # Three times slower here: 75 ms is the baseline's 25 ms.
    lines, moved = _measure.comparison("turns", {"worker CPU ms per turn": 76.0}, BASELINE,
                                       tolerance=0.2, args=[], speed_ms=60.0)
    assert not moved and any("scaled by 3.00" in line for line in lines)
    _, moved = _measure.comparison("turns", {"worker CPU ms per turn": 100.0}, BASELINE,
                                   tolerance=0.2, args=[], speed_ms=60.0)
    assert moved == ["turns: worker CPU ms per turn 75 -> 100 (+33%)"]


def test_without_a_calibration_the_baseline_compares_unscaled_and_says_so():
    baseline = json.loads(json.dumps(BASELINE))
    del baseline["benches"]["turns"]["speed_ms"]
    lines, moved = _measure.comparison("turns", {"worker CPU ms per turn": 76.0}, baseline,
                                       tolerance=0.2, args=[], speed_ms=60.0)
    assert moved and any("no calibration" in line for line in lines)


def test_the_calibration_is_recorded_with_the_baseline(tmp_path):
    path = tmp_path / "baseline.json"
    _measure.write_baseline([{"bench": "turns", "cpu": {"x": 1.0}, "args": [], "machine": "m",
                              "at": "2026-11-28T12:00:00+00:00", "speed_ms": 57.0}], commit="abc", path=path)
    assert json.loads(path.read_text())["benches"]["turns"]["speed_ms"] == 57.0
    assert _measure.machine_speed_ms() > 0


def test_a_run_whose_machine_slowed_down_says_so(monkeypatch):
    from bench import _measure

    monkeypatch.setattr(_measure, "_calibrated_ms", lambda: 60.0)
    assert "calibration 36 ms at start, 60 ms at the end" in _measure.speed_drift_note(36.0)
    assert _measure.speed_drift_note(55.0) is None  # within a fifth
