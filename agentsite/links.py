"""Addresses of rows: ``reverse`` for links rendered many times on one page.

``reverse`` walks the URL patterns, converts and re-checks every argument and quotes the result:
40-70 µs a link, which a page of sixty conversations and twenty turns with six links each pays
a couple of hundred times. An address whose arguments are all UUIDs is the same string with
only the UUIDs changed, so ``link`` reverses a name once per process (per script prefix and URL
configuration) with stand-in UUIDs and afterwards puts the real ones in their places (an address
without arguments is kept as it is). Anything else (other arguments, a pattern that does not
show a UUID as it is) goes through ``reverse``.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.urls import get_script_prefix, get_urlconf, reverse

# (name, number of arguments, script prefix, URL configuration) -> the address split around its
# arguments, or None where the shortcut does not apply.
_SPLIT: dict[tuple[Any, ...], tuple[str, ...] | None] = {}


def _split(name: str, count: int) -> tuple[str, ...] | None:
    stand_ins = [uuid.uuid4() for _ in range(count)]
    address = reverse(name, args=stand_ins)
    parts: list[str] = []
    rest = address
    for stand_in in stand_ins:
        text = str(stand_in)
        if address.count(text) != 1 or text not in rest:
            return None
        before, rest = rest.split(text, 1)
        parts.append(before)
    parts.append(rest)
    return tuple(parts)


def link(name: str, *args: Any) -> str:
    """``reverse(name, args=args)``, the same string, without walking the patterns again when
    every argument is a UUID (or there is none)."""
    if not all(isinstance(arg, uuid.UUID) for arg in args):
        return reverse(name, args=args)
    key = (name, len(args), get_script_prefix(), get_urlconf())
    try:
        parts = _SPLIT[key]
    except KeyError:
        parts = _SPLIT[key] = _split(name, len(args))
    if parts is None:
        return reverse(name, args=args)
    out = [parts[0]]
    for arg, after in zip(args, parts[1:], strict=True):
        out.append(str(arg))
        out.append(after)
    return "".join(out)
