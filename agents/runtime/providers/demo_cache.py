"""The demo model's prompt cache: cache reads for a stable prefix, as a provider reports them.

A request is read as a list of *units* in the order providers cache it: each tool definition,
then each system block, then each block of each message. A unit is ``(key, chars)``: a hash of
what it holds (with its kind and role) and its length in characters as the demo counts them.

The cache remembers, per ``(provider name, model)``, the unit keys of the last
``MAX_REQUESTS`` requests it answered (``MAX_KEYS`` pairs at most, least recently used dropped
first), in this process only. A new request reads from the cache the longest run of leading
units it shares with one of them. Like the providers' own caches, nothing shorter than
``MIN_TOKENS`` (1,024, Anthropic's and OpenAI's minimum) is cached: a shorter request is not
remembered and a shorter shared prefix reads nothing. Cache writes are not reported (the demo
model is free; a read is what makes a stable prefix visible).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from itertools import accumulate
from threading import Lock

MIN_TOKENS = 1024
MAX_KEYS = 32
MAX_REQUESTS = 8

Unit = tuple[int, int]  # (hash of the content, characters)


class PromptCache:
    def __init__(self, *, min_tokens: int = MIN_TOKENS, max_keys: int = MAX_KEYS,
                 max_requests: int = MAX_REQUESTS) -> None:
        self.min_tokens = min_tokens
        self.max_keys = max_keys
        self.max_requests = max_requests
        self._entries: OrderedDict[tuple[str, str], list[list[int]]] = OrderedDict()
        self._lock = Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def read(self, key: tuple[str, str], units: Sequence[Unit], *,
             min_tokens: int | None = None) -> int:
        """Characters of the longest remembered prefix of ``units`` (0 below the minimum:
        ``min_tokens``, else the cache's own); the request is remembered for the next ones."""
        keys = [k for k, _ in units]
        ends = list(accumulate(chars for _, chars in units))
        total = ends[-1] if ends else 0
        minimum = (self.min_tokens if min_tokens is None else max(int(min_tokens), 1)) * 4
        shared = 0
        with self._lock:
            remembered = self._entries.get(key)
            if remembered is not None:
                self._entries.move_to_end(key)
                shared = max((_common_length(keys, old) for old in remembered), default=0)
            if total >= minimum:
                if remembered is None:
                    remembered = self._entries[key] = []
                    while len(self._entries) > self.max_keys:
                        self._entries.popitem(last=False)
                if keys in remembered:
                    remembered.remove(keys)
                remembered.append(keys)
                del remembered[:-self.max_requests]
        chars = ends[shared - 1] if shared else 0
        return chars if chars >= minimum else 0


def _common_length(new: list[int], old: list[int]) -> int:
    """How many leading units ``new`` and ``old`` share (list slices compare in C: a request
    that extends the remembered one is found with one comparison)."""
    limit = min(len(new), len(old))
    if new[:limit] == old[:limit]:
        return limit
    # Sharing k leading units implies sharing every shorter run: search the largest k.
    return bisect_right(range(limit), False, key=lambda k: new[:k + 1] != old[:k + 1])


PROMPT_CACHE = PromptCache()


def tokens_before(chars: int) -> int:
    """Whole tokens (of four characters) inside a prefix of ``chars`` characters."""
    return chars // 4


__all__ = ["MIN_TOKENS", "PROMPT_CACHE", "PromptCache", "Unit", "tokens_before"]
