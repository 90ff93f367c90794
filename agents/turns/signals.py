"""Signals through Redis: to a running turn, "stop" and "approve/deny this tool call"; from it,
"this turn has ended".

The database stays the record (``Trace.cancel_requested_at``, the approval step, the trace's
status); these keys are how a worker learns about a decision quickly, and how a request waiting
for a turn's answer learns that it is there. The web side sets the first two. In a worker, one thread
polls the cancel keys of all its running turns at once (``CancelWatch``), and a turn waiting for
an approval polls that call's key with ``redis.asyncio`` (``TurnSignals``). A failure to reach Redis
is logged and reported as ``False``, never raised: the worker also checks the database flag on
every heartbeat, and an approval nobody can deliver times out as a denial.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from django.conf import settings

from agents.runtime.cancel import CancelToken
from agents.runtime.loop import ApprovalDecision, ApprovalRequest
from traces.record.live import uuid_hex

logger = logging.getLogger(__name__)

CANCEL_KEY = "agentsite:cancel:{trace}"
APPROVAL_KEY = "agentsite:approval:{trace}:{call}"
ENDED_KEY = "agentsite:ended:{trace}"
# A waiter that comes later than this reads the trace instead.
ENDED_TTL_S = 300
# Longer than any turn may run (the hard limit is at most an hour and a half).
SIGNAL_TTL_S = 6 * 3600
APPROVAL_POLL_S = 0.2


def cancel_key(trace_uuid: Any) -> str:
    return CANCEL_KEY.format(trace=uuid_hex(trace_uuid))


def approval_key(trace_uuid: Any, call_id: str) -> str:
    return APPROVAL_KEY.format(trace=uuid_hex(trace_uuid), call=call_id)


@functools.lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def _set(key: str, value: str) -> bool:
    try:
        _client(settings.REDIS_URL).set(key, value, ex=SIGNAL_TTL_S)
    except redis.RedisError:
        logger.warning("could not set %s in Redis", key, exc_info=True)
        return False
    return True


def cancel_signal_send(*, trace_uuid: Any, reason: str) -> bool:
    """Tell the worker running this trace to stop; True when Redis took the signal."""
    return _set(cancel_key(trace_uuid), reason)


def approval_signal_send(*, trace_uuid: Any, call_id: str, approved: bool, decided_by: str,
                         role: str = "", reason: str = "") -> bool:
    """Deliver a decision on one tool call that waits for approval. ``role`` says in what capacity
    the person decided ("the conversation's owner", "a team admin"): the model is told that, never
    their name. ``reason``: the person's words, if any; the model reads them with a denial, and
    the approval step records them either way."""
    decision: dict[str, Any] = {"approved": bool(approved), "decided_by": decided_by, "role": role}
    if reason:
        decision["reason"] = reason
    return _set(approval_key(trace_uuid, call_id), json.dumps(decision))


def ended_signal_send(*, trace_uuid: Any) -> bool:
    """Say that this trace's turn has ended, to a request waiting for its answer
    (``ended_signal_wait``): one round trip, kept ``ENDED_TTL_S`` so that a waiter that comes
    after the end finds it at once."""
    key = ENDED_KEY.format(trace=uuid_hex(trace_uuid))
    try:
        pipe = _client(settings.REDIS_URL).pipeline(transaction=False)
        pipe.rpush(key, 1)
        pipe.expire(key, ENDED_TTL_S)
        pipe.execute()
    except redis.RedisError:
        logger.warning("could not signal the end of trace %s in Redis", uuid_hex(trace_uuid),
                       exc_info=True)
        return False
    return True


_waiting_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = (
    weakref.WeakKeyDictionary())


async def ended_signal_wait(*, trace_uuid: Any, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``ended_signal_send`` of this trace; True when it came. A
    blocking pop on the trace's own key: no polling, one round trip. Never raises: a Redis that
    is down or hung makes it wait out the time, and the caller reads the database then."""
    loop = asyncio.get_running_loop()
    client = _waiting_clients.get(loop)
    if client is None:
        client = _waiting_clients[loop] = aioredis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=2)
    key = ENDED_KEY.format(trace=uuid_hex(trace_uuid))
    started = time.monotonic()
    try:
        # The socket's own deadline: the pop's, and a moment more for a Redis that hangs.
        async with asyncio.timeout(timeout_s + 2):
            got = await client.blpop([key], timeout=max(timeout_s, 0.01))
        return got is not None
    except (redis.RedisError, OSError, TimeoutError) as exc:
        _warn_unreachable(key, exc)
        await asyncio.sleep(max(timeout_s - (time.monotonic() - started), 0))
        return False


_warned_at = 0.0


def _warn_unreachable(key: str, exc: Exception) -> None:
    # At most once a minute per process: an outage must not flood the worker's log.
    global _warned_at
    now = time.monotonic()
    if now - _warned_at > 60:
        _warned_at = now
        logger.warning("could not read %s from Redis (%s); cancellation falls back to the "
                       "database flag, approvals will time out", key, exc)


class CancelWatch:
    """One thread per worker process that polls the cancel keys of every turn the process runs
    (one ``MGET`` every ``TURN_CANCEL_POLL_S``) and cancels the turn's token when its key is
    set. ``CancelToken.cancel`` is thread-safe and wakes the turn's loop at once."""

    _shared: CancelWatch | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._tokens: dict[str, CancelToken] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def shared(cls) -> CancelWatch:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def watch(self, trace_uuid: Any, token: CancelToken) -> None:
        with self._lock:
            self._tokens[cancel_key(trace_uuid)] = token
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cancel-watch", daemon=True)
                self._thread.start()
        self._wake.set()

    def unwatch(self, trace_uuid: Any) -> None:
        with self._lock:
            self._tokens.pop(cancel_key(trace_uuid), None)

    def poll(self) -> int:
        """Look at every watched key once; returns how many turns were cancelled."""
        with self._lock:
            watched = list(self._tokens.items())
        if not watched:
            return 0
        try:
            values = _client(settings.REDIS_URL).mget([key for key, _ in watched])
        except redis.RedisError as exc:
            _warn_unreachable("the cancel keys", exc)
            return 0
        cancelled = 0
        for (key, token), value in zip(watched, values, strict=True):
            if value is not None:
                token.cancel(value.decode(errors="replace") or "Cancelled by user.")
                with self._lock:
                    self._tokens.pop(key, None)
                cancelled += 1
        return cancelled

    def _run(self) -> None:
        while True:
            with self._lock:
                idle = not self._tokens
            if idle:
                self._wake.wait(timeout=60)
                self._wake.clear()
                continue
            self.poll()
            time.sleep(settings.TURN_CANCEL_POLL_S)


class TurnSignals:
    """The running turn's reads of its signals, with a ``redis.asyncio`` client made on first
    use inside the turn's loop (most turns never need it) and closed with the turn."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client: aioredis.Redis | None = None

    async def get(self, key: str) -> bytes | None:
        if self.client is None:
            self.client = aioredis.Redis.from_url(self.url, socket_timeout=2,
                                                  socket_connect_timeout=2)
        try:
            return await self.client.get(key)
        except (redis.RedisError, OSError) as exc:
            _warn_unreachable(key, exc)
            return None

    async def aclose(self) -> None:
        if self.client is None:
            return
        try:
            await self.client.aclose()
        except (redis.RedisError, OSError):  # closing a broken connection is not a failure
            logger.debug("closing the signal client failed", exc_info=True)


@dataclass
class RedisApprover:
    """``Approver`` for the runtime: waits for ``approval_signal_send`` on the call's key. The
    loop bounds the wait with the agent's approval timeout and cancels it on a stop."""

    signals: TurnSignals
    trace_uuid: Any
    poll_s: float = APPROVAL_POLL_S

    def __post_init__(self) -> None:
        self.decided_by: dict[str, str] = {}

    async def request(self, call: ApprovalRequest) -> ApprovalDecision:
        key = approval_key(self.trace_uuid, call.call_id)
        while True:
            value = await self.signals.get(key)
            if value is not None:
                return self._decision(call.call_id, value)
            await asyncio.sleep(self.poll_s)

    def _decision(self, call_id: str, value: bytes) -> ApprovalDecision:
        try:
            data = json.loads(value)
        except ValueError:
            data = {}
        approved = bool(data.get("approved")) if isinstance(data, dict) else False
        if not isinstance(data, dict):
            data = {}
        if data.get("decided_by"):
            self.decided_by[call_id] = str(data["decided_by"])
        # "declined by a team admin: not on a Friday" (a trailing stop is the recorder's to add)
        why = str(data.get("reason") or "").strip().rstrip(".")
        if approved:
            return ApprovalDecision(True, f"approved: {why}" if why else "approved")
        declined = f"declined by {data.get('role') or 'a person'}"
        return ApprovalDecision(False, f"{declined}: {why}" if why else declined)
