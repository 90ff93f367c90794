"""Regular expressions written by tenants (routing-rule patterns, JSON-schema ``pattern``s),
compiled with RE2: matching takes time linear in the text, whatever the pattern. Python's
``re`` backtracks (``(a|a)*b`` on 26 characters took 6.5 s while holding the interpreter lock,
stalling every tenant's turns); RE2 does not, at the price of the features that need
backtracking — backreferences, lookahead and lookbehind, atomic groups and possessive
repeats — which are refused with a sentence naming the feature.

Differences from ``re`` that a pattern author may notice: ``\\w``, ``\\d``, ``\\s`` and ``\\b``
are ASCII-only (use ``\\p{L}`` for letters of any script); the rest of the syntax (classes,
groups, ``(?i)``, ``{m,n}``, Unicode classes) is the same.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import re2

MAX_PATTERN_LENGTH = 500
# RE2's memory budget per compiled pattern: bounds its automaton, and so the size of the
# program a pattern like "(x{1000}){1000}" would need.
MAX_PROGRAM_MEMORY = 8 << 20

# (what ``re`` understands, the feature's name) for the sentence when RE2 refuses it.
_FEATURES = (
    (re.compile(r"\(\?<?[=!]"), "lookahead or lookbehind ('(?=…)', '(?!…)', '(?<=…)')"),
    (re.compile(r"\\[1-9]|\(\?P=\w+\)|\\g<"), "a backreference ('\\1', '(?P=name)')"),
    (re.compile(r"\(\?>"), "an atomic group ('(?>…)')"),
    (re.compile(r"[*+?}]\+"), "a possessive repeat ('a++', 'a*+')"),
    (re.compile(r"\(\?\("), "a conditional group ('(?(1)…)')"),
)


class PatternError(ValueError):
    """A pattern that cannot be used; the message says why, as a sentence."""


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_MEMORY
    return options


@functools.lru_cache(maxsize=2048)
def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled for linear-time matching (``.search(text)`` like ``re``);
    ``PatternError`` when it cannot be."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(f"Pattern is {len(pattern)} characters long; keep patterns under "
                           f"{MAX_PATTERN_LENGTH} characters.")
    try:
        return re2.compile(pattern, options=_options())
    except re2.error as exc:
        try:  # compiling (never matching) with re names a syntax error best
            re.compile(pattern)
        except re.error as syntax:
            where = f" at position {syntax.pos}" if syntax.pos is not None else ""
            raise PatternError(f"Pattern {pattern!r} is not a valid regular expression: "
                               f"{syntax.msg}{where}.") from exc
        for finder, feature in _FEATURES:
            if finder.search(pattern):
                raise PatternError(
                    f"Pattern {pattern!r} uses {feature}, which is not supported: patterns run "
                    "on a linear-time engine (RE2) so that no pattern can stall the server. "
                    "Rewrite it without that feature.") from exc
        reason = str(exc).strip() or "it is not a valid regular expression"
        raise PatternError(f"Pattern {pattern!r} cannot be used: {reason}.") from exc


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used, as a sentence; None when it can."""
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        return str(exc)
    return None
