"""Model providers. ``registry`` maps a provider kind to its class (see ``get_provider_class``)."""

from __future__ import annotations

from .base import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Outcome,
    Provider,
    ProviderError,
    StreamDone,
    StreamEvent,
    StreamRestart,
    StreamText,
    StreamThinking,
    SystemBlock,
    outcome_of,
)
from .registry import PROVIDER_CLASSES, build_provider, get_provider_class

__all__ = [
    "PROVIDER_CLASSES",
    "Capabilities",
    "ChatRequest",
    "ChatResponse",
    "ErrorKind",
    "Outcome",
    "Provider",
    "ProviderError",
    "StreamDone",
    "StreamEvent",
    "StreamRestart",
    "StreamText",
    "StreamThinking",
    "SystemBlock",
    "build_provider",
    "get_provider_class",
    "outcome_of",
]
