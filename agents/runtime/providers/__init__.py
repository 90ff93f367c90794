"""Model providers. ``registry`` maps a provider kind to its class (see ``get_provider_class``)."""

from __future__ import annotations

from .base import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    ErrorKind,
    Provider,
    ProviderError,
    StreamDone,
    StreamEvent,
    StreamText,
    StreamThinking,
    SystemBlock,
)

__all__ = [
    "Capabilities",
    "ChatRequest",
    "ChatResponse",
    "ErrorKind",
    "Provider",
    "ProviderError",
    "StreamDone",
    "StreamEvent",
    "StreamText",
    "StreamThinking",
    "SystemBlock",
]
