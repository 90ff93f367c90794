"""Keeping API keys out of error messages, failure lines and traces."""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"
DETAIL_LIMIT = 500
# The provider's own words about a failure, kept for the trace: long enough for the part of a
# long error body that names the cause.
ERROR_DETAIL_LIMIT = 4000

_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")
_PREFIXED_KEY = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{12,}")
_KEY_FIELD = re.compile(
    r"(?i)\b(x-api-key|api[_-]?key|authorization)([\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{6,}")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each known secret replaced, and anything shaped like a key or a bearer
    token masked too (a provider may echo a key that is not ours)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    text = _BEARER.sub(f"Bearer {REDACTED}", text)
    text = _PREFIXED_KEY.sub(REDACTED, text)
    return _KEY_FIELD.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def sanitize_detail(text: str, secrets: Iterable[str] = (), limit: int = DETAIL_LIMIT) -> str:
    """Redacted, whitespace-collapsed and shortened: fit for a one-line report."""
    text = " ".join(redact(text, secrets).split())
    return text if len(text) <= limit else text[:limit] + "..."
