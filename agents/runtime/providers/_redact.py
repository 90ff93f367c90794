"""Keeping API keys out of error messages, failure lines and traces: the provider's own key
wherever it occurs, and every credential the platform's scrubber finds by shape."""

from __future__ import annotations

from collections.abc import Iterable

from ..scrub import scrub_secrets

REDACTED = "[REDACTED]"
DETAIL_LIMIT = 500
# The provider's own words about a failure, kept for the trace: long enough for the part of a
# long error body that names the cause.
ERROR_DETAIL_LIMIT = 4000


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each known secret replaced, and anything shaped like a key or a bearer
    token masked too (a provider may echo a key that is not ours)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return scrub_secrets(text)


def sanitize_detail(text: str, secrets: Iterable[str] = (), limit: int = DETAIL_LIMIT) -> str:
    """Redacted, whitespace-collapsed and shortened: fit for a one-line report."""
    text = " ".join(redact(text, secrets).split())
    return text if len(text) <= limit else text[:limit] + "..."
