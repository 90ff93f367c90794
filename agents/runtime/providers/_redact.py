"""Keeping API keys out of error messages, failure lines and traces: the provider's own key
wherever it occurs, and every credential the platform's scrubber finds by shape."""

from __future__ import annotations

from collections.abc import Iterable

from ..scrub import scrubbed_line

DETAIL_LIMIT = 500
# The provider's own words about a failure, kept for the trace: long enough for the part of a
# long error body that names the cause.
ERROR_DETAIL_LIMIT = 4000


def sanitize_detail(text: str, secrets: Iterable[str] = (), limit: int = DETAIL_LIMIT) -> str:
    """Redacted, whitespace-collapsed and shortened: fit for a one-line report."""
    return scrubbed_line(text, limit, secrets)
