"""Requests and tokens per minute, as sliding windows in Redis, checked and taken atomically.

A *window* is one scope's limits (an API key, a person in a team). ``limits_admit`` checks every
window a request falls under and, only if all of them have room, records the request in all of
them, in one Lua script: two racing requests can never both take the last place. The comparison
is the budgets' (``traces.costs.budgets``): a request is refused when what the window holds plus
what this request adds would be *over* the limit (``held + 1 > rpm``, ``held + tokens > tpm``), so a
limit of 10 requests per minute lets exactly 10 through.
Tokens are known only when a turn ends, so a request reserves an estimate (its prompt, counted
as the runtime estimates tokens) and ``limits_settle`` replaces it with what the turn used.
Reservations expire with the window, so a request whose turn never ends frees its tokens a minute
later.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from django.conf import settings

WINDOW_S = 60
KEY = "agentsite:rl:{scope}:{part}"

# KEYS: per window (requests zset, tokens zset, tokens hash). ARGV: now (ms), window (ms),
# request id, tokens, then per window: rpm, tpm (0 = no limit).
# Returns {0} when admitted, else {window number (1-based), "rpm"|"tpm", held, retry after ms}
# (retry after -1: the request alone is over the limit and never fits).
_ADMIT = """
local now, win, id, tokens = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local n = #KEYS / 3
for i = 0, n - 1 do
  local req, tok, tokv = KEYS[3*i+1], KEYS[3*i+2], KEYS[3*i+3]
  local rpm, tpm = tonumber(ARGV[5+2*i]), tonumber(ARGV[6+2*i])
  redis.call('ZREMRANGEBYSCORE', req, '-inf', now - win)
  local old = redis.call('ZRANGEBYSCORE', tok, '-inf', now - win)
  for _, member in ipairs(old) do redis.call('HDEL', tokv, member) end
  redis.call('ZREMRANGEBYSCORE', tok, '-inf', now - win)
  if rpm > 0 then
    local held = redis.call('ZCARD', req)
    if held + 1 > rpm then
      local first = redis.call('ZRANGE', req, 0, held - rpm, 'WITHSCORES')
      return {i + 1, 'rpm', held, math.max(tonumber(first[#first]) + win - now, 1)}
    end
  end
  if tpm > 0 then
    local entries = redis.call('ZRANGE', tok, 0, -1, 'WITHSCORES')
    local held, amounts = 0, {}
    for j = 1, #entries, 2 do
      local amount = tonumber(redis.call('HGET', tokv, entries[j]) or '0') or 0
      amounts[#amounts + 1] = {amount, tonumber(entries[j + 1])}
      held = held + amount
    end
    if held + tokens > tpm then
      local retry = -1
      if tokens <= tpm then
        local freed = 0
        for _, entry in ipairs(amounts) do
          freed = freed + entry[1]
          if held - freed + tokens <= tpm then retry = math.max(entry[2] + win - now, 1) break end
        end
      end
      return {i + 1, 'tpm', held, retry}
    end
  end
end
for i = 0, n - 1 do
  local req, tok, tokv = KEYS[3*i+1], KEYS[3*i+2], KEYS[3*i+3]
  local rpm, tpm = tonumber(ARGV[5+2*i]), tonumber(ARGV[6+2*i])
  if rpm > 0 then redis.call('ZADD', req, now, id) redis.call('PEXPIRE', req, 2 * win) end
  if tpm > 0 then
    redis.call('ZADD', tok, now, id) redis.call('HSET', tokv, id, tokens)
    redis.call('PEXPIRE', tok, 2 * win) redis.call('PEXPIRE', tokv, 2 * win)
  end
end
return {0}
"""

# KEYS: per window (tokens zset, tokens hash); ARGV: request id, tokens.
_SETTLE = """
for i = 1, #KEYS, 2 do
  if redis.call('ZSCORE', KEYS[i], ARGV[1]) then redis.call('HSET', KEYS[i + 1], ARGV[1], ARGV[2]) end
end
return 0
"""


@dataclass(frozen=True)
class Window:
    """One scope's limits. ``scope``: a stable name ("key:12", "member:3:7"); ``whose``: how a
    refusal names it ("This API key's", "Your")."""

    scope: str
    whose: str
    rpm: int | None = None
    tpm: int | None = None

    @property
    def limited(self) -> bool:
        return bool(self.rpm or self.tpm)


@dataclass(frozen=True)
class Refusal:
    """A request over a limit: what to tell the caller, and when to try again (seconds)."""

    window: Window
    kind: str  # "rpm" or "tpm"
    held: int
    retry_after_s: int | None  # None: this request alone is over the limit

    @property
    def message(self) -> str:
        whose = self.window.whose
        if self.kind == "rpm":
            return (f"Rate limit reached: {whose} limit is {self.window.rpm:,} requests per minute "
                    f"and {self.held:,} were made in the last minute. Try again in "
                    f"{self.retry_after_s} s.")
        if self.retry_after_s is None:
            return (f"This request alone (about {self._tokens:,} tokens) is over {whose.lower()} "
                    f"limit of {self.window.tpm:,} tokens per minute. Send less history, or ask "
                    "a team admin to raise the limit.")
        return (f"Rate limit reached: {whose} limit is {self.window.tpm:,} tokens per minute and "
                f"{self.held:,} were used in the last minute. Try again in {self.retry_after_s} s.")

    _tokens: int = 0


class LimiterUnavailable(Exception):
    """Redis could not be reached to check a limit: the request is refused, not let through."""


@functools.lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def _keys(window: Window, *parts: str) -> list[str]:
    return [KEY.format(scope=window.scope, part=part) for part in parts]


def limits_admit(windows: Sequence[Window], *, request_id: str, tokens: int) -> Refusal | None:
    """Take a place for this request in every window, or none: the first window it would go
    over, as a ``Refusal``. Windows without limits are skipped (no Redis call at all when none
    has one). Raises ``LimiterUnavailable`` when Redis cannot be reached."""
    limited = [w for w in windows if w.limited]
    if not limited:
        return None
    keys: list[str] = []
    args: list[int | str] = [int(time.time() * 1000), WINDOW_S * 1000, request_id, max(int(tokens), 0)]
    for window in limited:
        keys += _keys(window, "req", "tok", "tokv")
        args += [window.rpm or 0, window.tpm or 0]
    try:
        answer = _client(settings.REDIS_URL).eval(_ADMIT, len(keys), *keys, *args)
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc
    if not answer or int(answer[0]) == 0:
        return None
    window = limited[int(answer[0]) - 1]
    kind = answer[1].decode() if isinstance(answer[1], bytes) else str(answer[1])
    retry_ms = int(answer[3])
    return Refusal(window, kind, int(answer[2]),
                   None if retry_ms < 0 else max(1, math.ceil(retry_ms / 1000)), _tokens=int(tokens))


def limits_settle(scopes: Sequence[str], *, request_id: str, tokens: int) -> None:
    """Replace the request's token reservation in these windows (``Window.scope``s) with what
    it used. A failure is not raised: the reservation expires with the window."""
    if not scopes:
        return
    keys: list[str] = []
    for scope in scopes:
        keys += _keys(Window(scope, ""), "tok", "tokv")
    try:
        _client(settings.REDIS_URL).eval(_SETTLE, len(keys), *keys, request_id, max(int(tokens), 0))
    except redis.RedisError:
        return
