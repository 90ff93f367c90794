"""Keys for the fragments pages keep rendered (``{% cache %}``, in each process's own memory).

Rendering the rows a page repeats (a conversation's turns, a trace's timeline, the trace list)
is most of those pages' work, and a finished row rarely changes. A kept fragment is keyed by a
digest of everything it shows, so any change (a re-pricing, a rating, a rename) makes a new key
and the fragment is rendered again; nothing is invalidated by hand. What still moves (a running
turn) is not kept, nor is anything under ``DEBUG``, where templates change under a running
server. A fragment that holds something of its reader (a form's CSRF token, their rating) has
it in its key; the view has checked the reader's access before the cache is consulted. A
kept fragment unread for an hour (the templates' ``{% cache 3600 %}``) is dropped.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings


def kept_key(*shown: Any, running: bool = False) -> str | None:
    """A digest of ``shown`` (the values a fragment shows, with stable ``repr``s: numbers,
    strings, UUIDs, dates, decimals, tuples and dataclasses of them), or None when the fragment
    is not to be kept (``running``, or ``DEBUG``)."""
    if running or settings.DEBUG:
        return None
    return hashlib.blake2b(repr(shown).encode(), digest_size=16).hexdigest()
