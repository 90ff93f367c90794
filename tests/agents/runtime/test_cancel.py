"""Cancellation before the guarded work starts."""

from __future__ import annotations

import inspect

import pytest

from agents.runtime.cancel import CancelToken, TurnCancelled, guarded


async def test_work_guarded_by_a_cancelled_token_is_closed_not_left_unawaited():
    token = CancelToken()
    token.cancel("stop")
    started = []

    async def work():
        started.append(True)

    coroutine = work()
    with pytest.raises(TurnCancelled, match="stop"):
        await guarded(coroutine, cancel=token)
    # closed, so Python does not warn "coroutine ... was never awaited"
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    assert started == []
