"""Provider kinds by name, and building one from configuration."""

from __future__ import annotations

import inspect
from typing import Any

from .anthropic import AnthropicProvider
from .base import Provider
from .demo import DemoProvider
from .openai import OpenAIProvider

PROVIDER_CLASSES: dict[str, type[Provider]] = {
    "openai": OpenAIProvider,
    "anthropic": AnthropicProvider,
    "demo": DemoProvider,
}


def get_provider_class(kind: str) -> type[Provider]:
    try:
        return PROVIDER_CLASSES[kind]
    except KeyError:
        known = ", ".join(sorted(PROVIDER_CLASSES))
        raise ValueError(f"Unknown provider kind {kind!r}; known kinds: {known}.") from None


def build_provider(kind: str, **options: Any) -> Provider:
    """A provider of ``kind`` built from configuration. Options the kind does not take are
    left out (a demo provider has no base URL or key), and ``None`` or empty-string values
    fall back to the class's defaults, so one stored row shape serves every kind."""
    cls = get_provider_class(kind)
    parameters = inspect.signature(cls.__init__).parameters
    accepted = {name for name, p in parameters.items()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self"}
    return cls(**{k: v for k, v in options.items() if k in accepted and v is not None and v != ""})
