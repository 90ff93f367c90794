"""Usernames people cannot be impersonated with. A username is shown to teammates beside every
message, approval and audit entry, so on sign-up (alone or from an invitation) it must be:

* what Django's ``UnicodeUsernameValidator`` allows (letters, digits and ``@ . + - _``): no
  markup, spaces, zero-width or bidirectional-override characters;
* of one script (``confusable_homoglyphs``): no Latin ``alice`` with a Cyrillic ``а``;
* not a look-alike of an existing name: names are compared by a skeleton (NFKC, case folded,
  combining marks dropped, each character replaced by the ASCII letter it can be mistaken for),
  so ``АLICE`` in Cyrillic, ``alice`` in full-width letters, ``Alice``, ``alıce`` with a dotless
  ``ı`` and ``alicé`` are all taken once ``alice`` is.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from confusable_homoglyphs import confusables
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError

_VALIDATOR = UnicodeUsernameValidator()


def skeleton(name: str) -> str:
    """What ``name`` looks like: NFKC, case folded, accents and other combining marks dropped,
    look-alikes replaced by the ASCII letter they can be taken for, of any script, Latin's own
    included (``ı``, dotless, is ``i``; ``ɑ`` is ``a``)."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", name).casefold())
    out = []
    for char in text:
        if unicodedata.category(char) == "Mn":  # é is e with an accent: it looks like e
            continue
        found = confusables.is_confusable(char, greedy=True) if not char.isascii() else False
        latin = next((h["c"] for f in (found or []) for h in f["homoglyphs"] if h["c"].isascii()), None)
        out.append(latin.casefold() if latin else char)
    return "".join(out)


def display_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a team (shown to everyone in it), as a sentence; None when it
    can: no invisible, bidirectional-override or control characters, one script."""
    if any(unicodedata.category(c) in ("Cf", "Cc", "Co", "Cn") for c in name):
        return "Names cannot contain invisible or control characters."
    if confusables.is_mixed_script(name, allowed_aliases=["COMMON"]):
        return "Use letters of one script in a name (it mixes, for example, Latin and Cyrillic)."
    return None


def username_problem(name: str, existing: Iterable[str] = ()) -> str | None:
    """Why ``name`` cannot be a new username, as a sentence; None when it can."""
    if any(unicodedata.category(c) in ("Cf", "Cc", "Co", "Cn", "Zs") for c in name):
        return "Usernames cannot contain spaces, invisible or control characters."
    try:
        _VALIDATOR(name)
    except ValidationError:
        return "Use only letters, digits and @ . + - _ in a username."
    if name != unicodedata.normalize("NFKC", name):
        return "Use ordinary letters in a username (not full-width or styled variants)."
    if confusables.is_mixed_script(name, allowed_aliases=["COMMON"]):
        return "Use letters of one script in a username (it mixes, for example, Latin and Cyrillic)."
    mine = skeleton(name)
    if any(skeleton(other) == mine for other in existing):
        return "That username is taken, or looks the same as one that is. Choose another."
    return None
