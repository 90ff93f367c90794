"""The sliding windows against a real Redis: the exact boundary (the budgets' comparison), all
windows or none, racing threads, token reservations settled to what a turn used, Retry-After,
and Redis unreachable refusing instead of letting requests through."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentsite.ratelimit import LimiterUnavailable, Window, limits_admit, limits_settle


def scope() -> str:
    return f"test:{uuid.uuid4().hex}"


def admit(windows, tokens: int = 0, request_id: str | None = None):
    return limits_admit(windows, request_id=request_id or uuid.uuid4().hex, tokens=tokens)


def test_a_limit_of_n_requests_lets_exactly_n_through(use_redis):
    window = Window(scope(), "This key's", rpm=3)
    assert [admit([window]) is None for _ in range(5)] == [True, True, True, False, False]
    refusal = admit([window])
    assert refusal.kind == "rpm" and refusal.held == 3
    assert 1 <= refusal.retry_after_s <= 60
    assert "3 requests per minute" in refusal.message


def test_windows_without_limits_never_reach_redis(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    assert admit([Window(scope(), "Your")], tokens=10**9) is None


def test_either_every_window_takes_the_request_or_none_does(use_redis):
    roomy, full = Window(scope(), "Your", rpm=10), Window(scope(), "This key's", rpm=1)
    assert admit([roomy, full]) is None
    refusal = admit([roomy, full])
    assert refusal.window == full
    # The refused request took no place in the roomy window: 9 more still fit there.
    assert [admit([roomy]) is None for _ in range(10)] == [True] * 9 + [False]


def test_racing_threads_cannot_overshoot(use_redis):
    window = Window(scope(), "This key's", rpm=7, tpm=10_000)
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: admit([window], tokens=10) is None, range(40)))
    assert results.count(True) == 7


def test_tokens_are_reserved_then_settled_to_what_the_turn_used(use_redis):
    window = Window(scope(), "This key's", tpm=100)
    first = uuid.uuid4().hex
    assert admit([window], tokens=30, request_id=first) is None
    assert admit([window], tokens=30) is None
    assert admit([window], tokens=40) is None  # 30 + 30 + 40 = 100: at the limit, not over it
    refusal = admit([window], tokens=1)
    assert (refusal.kind, refusal.held) == ("tpm", 100)
    limits_settle([window.scope], request_id=first, tokens=5)  # the turn used less
    assert admit([window], tokens=25) is None
    assert admit([window], tokens=1).held == 100


def test_a_request_alone_over_the_tokens_limit_can_never_fit(use_redis):
    refusal = admit([Window(scope(), "This key's", tpm=50)], tokens=51)
    assert refusal.retry_after_s is None
    assert "alone" in refusal.message and "50 tokens per minute" in refusal.message


def test_settling_an_unknown_request_changes_nothing(use_redis):
    window = Window(scope(), "Your", tpm=10)
    limits_settle([window.scope], request_id="never-admitted", tokens=10**6)
    assert admit([window], tokens=10) is None


def test_redis_unreachable_refuses_rather_than_lets_through(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    with pytest.raises(LimiterUnavailable):
        admit([Window(scope(), "Your", rpm=5)])
