"""Query classification: a message's keywords, patterns and length pick a hint, and the hint
picks a model route (ZeroClaw's ``classify_with_decision`` and channel route resolution).

Rules are tried by ``priority``, highest first; rules with equal priority keep their configured
order. A rule applies only when the message's length is within ``min_length``/``max_length``,
and matches when any keyword occurs in the message ignoring case, or any pattern matches it.

Where this differs from ZeroClaw, deliberately:

* ``patterns`` are regular expressions (searched like ``re.search``, case-sensitive unless the pattern says
  ``(?i)``); ZeroClaw tests them as case-sensitive substrings. A plain word is the same either
  way; a pattern with regex metacharacters must be escaped to match literally.
* Lengths count characters, not UTF-8 bytes, so a limit means the same for every script.
* Empty keywords and patterns are ignored: they would otherwise match every message.
* Patterns run on RE2 (``agents.runtime.patterns``), in time linear in the message whatever
  the pattern; features that need backtracking (backreferences, lookaround) are refused when
  the rule is built. Patterns search the first ``PATTERN_SEARCH_LIMIT`` characters (keywords
  search everything).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

from .patterns import compile_pattern, pattern_problem

PATTERN_SEARCH_LIMIT = 1_000


class InvalidRoutingRule(ValueError):
    """A routing rule that cannot be used; the message says what to fix."""


def pattern_error(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used as a routing pattern, as a sentence; None if it can."""
    return pattern_problem(pattern)


# -- rules ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RoutingRule:
    """One classification rule. Building it checks it and raises ``InvalidRoutingRule`` with a
    user-facing message; ``RoutingRule.lenient`` builds stored rules without raising."""

    hint: str
    keywords: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    priority: int = 0
    min_length: int | None = None
    max_length: int | None = None
    # Patterns left out because they are invalid (only ever non-empty for lenient rules).
    skipped_patterns: tuple[str, ...] = ()
    strict: InitVar[bool] = True
    _compiled: tuple[tuple[str, Any], ...] = field(
        default=(), init=False, repr=False, compare=False)

    def __post_init__(self, strict: bool) -> None:
        object.__setattr__(self, "keywords", tuple(self.keywords))
        object.__setattr__(self, "patterns", tuple(self.patterns))
        object.__setattr__(self, "skipped_patterns", tuple(self.skipped_patterns))
        object.__setattr__(self, "priority", int(self.priority))
        if strict:
            self.validate()
        compiled = tuple((p, compile_pattern(p)) for p in self.patterns if p)
        object.__setattr__(self, "_compiled", compiled)

    def errors(self) -> list[str]:
        """Every problem with this rule, as sentences; empty when it is usable."""
        problems: list[str] = []
        if not self.hint.strip():
            problems.append("A routing rule needs a hint.")
        for name in ("min_length", "max_length"):
            value = getattr(self, name)
            if value is not None and value < 0:
                problems.append(f"{name} cannot be negative.")
        if (self.min_length is not None and self.max_length is not None
                and self.min_length > self.max_length):
            problems.append(f"min_length ({self.min_length}) is larger than max_length "
                            f"({self.max_length}), so the rule could never match.")
        problems.extend(e for p in self.patterns if p and (e := pattern_error(p)) is not None)
        return problems

    def validate(self) -> None:
        """Raise ``InvalidRoutingRule`` if the rule is not usable."""
        errors = self.errors()
        if errors:
            raise InvalidRoutingRule(" ".join(errors))

    @classmethod
    def lenient(cls, *, hint: str, keywords: Iterable[str] = (), patterns: Iterable[str] = (),
                priority: int = 0, min_length: int | None = None,
                max_length: int | None = None) -> RoutingRule:
        """A rule from stored configuration, which must never stop a turn: invalid patterns
        are left out (listed in ``skipped_patterns``) and other problems are kept as they are
        (a rule with an impossible length range simply never matches)."""
        patterns = tuple(patterns)
        bad = tuple(p for p in patterns if p and pattern_error(p) is not None)
        return cls(hint=hint, keywords=tuple(keywords),
                   patterns=tuple(p for p in patterns if p not in bad), priority=priority,
                   min_length=min_length, max_length=max_length, skipped_patterns=bad,
                   strict=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, strict: bool = True) -> RoutingRule:
        fields = {
            "hint": str(data.get("hint") or ""),
            "keywords": tuple(str(k) for k in data.get("keywords") or ()),
            "patterns": tuple(str(p) for p in data.get("patterns") or ()),
            "priority": int(data.get("priority") or 0),
            "min_length": data.get("min_length"),
            "max_length": data.get("max_length"),
        }
        return cls(**fields) if strict else cls.lenient(**fields)

    def to_dict(self) -> dict[str, Any]:
        return {"hint": self.hint, "keywords": list(self.keywords),
                "patterns": list(self.patterns), "priority": self.priority,
                "min_length": self.min_length, "max_length": self.max_length}

    def applies_to_length(self, length: int) -> bool:
        if self.min_length is not None and length < self.min_length:
            return False
        return self.max_length is None or length <= self.max_length

    def match(self, message: str) -> Route | None:
        """This rule's route for ``message`` (ignoring priority), or None."""
        if not self.applies_to_length(len(message)):
            return None
        lowered = message.lower()
        for keyword in self.keywords:
            if keyword.strip() and keyword.lower() in lowered:
                return Route(self.hint, self, matched_keyword=keyword)
        searched = message[:PATTERN_SEARCH_LIMIT]
        for source, compiled in self._compiled:
            if compiled.search(searched):
                return Route(self.hint, self, matched_pattern=source)
        return None


@dataclass(frozen=True, slots=True)
class Route:
    """The classification of one message: the rule that matched and why."""

    hint: str
    rule: RoutingRule
    matched_keyword: str | None = None
    matched_pattern: str | None = None

    @property
    def priority(self) -> int:
        return self.rule.priority

    @property
    def reason(self) -> str:
        if self.matched_keyword is not None:
            return f"keyword {self.matched_keyword!r}"
        return f"pattern {self.matched_pattern!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"hint": self.hint, "priority": self.priority,
                "matched_keyword": self.matched_keyword,
                "matched_pattern": self.matched_pattern}


def classify(message: str, rules: Iterable[RoutingRule]) -> Route | None:
    """The first matching rule by priority (highest first, ties in the given order)."""
    for rule in sorted(rules, key=lambda r: -r.priority):
        route = rule.match(message)
        if route is not None:
            return route
    return None


# -- model routes -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ModelRoute:
    hint: str
    provider: str
    model: str

    def to_dict(self) -> dict[str, str]:
        return {"hint": self.hint, "provider": self.provider, "model": self.model}


def resolve_route(route: Route | str | None, model_routes: Sequence[ModelRoute]) -> ModelRoute | None:
    """The first model route whose hint equals the route's hint, ignoring case."""
    if route is None:
        return None
    hint = (route.hint if isinstance(route, Route) else route).lower()
    return next((r for r in model_routes if r.hint.lower() == hint), None)


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    """What routing decided for a message, for the trace and the admin's simulator. ``target``
    is None when the agent's default model answers."""

    route: Route | None
    target: ModelRoute | None

    def to_dict(self) -> dict[str, Any]:
        return {"route": self.route.to_dict() if self.route else None,
                "target": self.target.to_dict() if self.target else None}


def decide(message: str, rules: Iterable[RoutingRule],
           model_routes: Sequence[ModelRoute]) -> RoutingDecision:
    route = classify(message, rules)
    return RoutingDecision(route, resolve_route(route, model_routes))
