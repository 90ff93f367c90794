"""Log lines carry no secrets: ``ScrubSecretsFilter`` runs the platform's scrubber
(``agents.runtime.scrub.scrub_secrets``, Django-free) over every record's message, and masks
what an access log line would otherwise keep: token-like query parameters (``?token=…``,
``key=``, ``sig=``, ``code=`` …) and invitation tokens in paths (``/join/<token>/``).

Installed on every handler in ``settings.LOGGING``; a record is rewritten once (its message
formatted with its arguments, then scrubbed), so a handler added later sees the clean text.

``HealthAnswerFilter`` keeps ``/healthz`` saying "not yet" out of the error log: a 503 there is
the endpoint's answer to whoever asks (a load balancer, the dev runner waiting for its own
processes), not a request that failed.
"""

from __future__ import annotations

import logging
import re

from agents.runtime.scrub import scrub_secrets

_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:[a-z0-9_\-]*(?:token|key|secret|sig|signature|password|code|auth|session)"
    r"[a-z0-9_\-]*)=)[^&\s\"'#]++")
# Paths that carry a one-time token: /join/<token>/, /invitations/<token>/, /reset/<uid>/<token>/.
_PATH_TOKEN = re.compile(
    r"(?i)(/(?:join|invite|invitations?|accept|reset|password-reset|verify|confirm)/)"
    r"([^/\s?\"']{8,}+)((?:/[^/\s?\"']{8,}+)?)")


def scrub_log_text(text: str) -> str:
    text = _QUERY_SECRET.sub(lambda m: f"{m.group(1)}[REDACTED]", text)
    text = _PATH_TOKEN.sub(lambda m: f"{m.group(1)}[REDACTED]" + ("/[REDACTED]" if m.group(3) else ""),
                           text)
    return scrub_secrets(text)


class ScrubSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_secrets_scrubbed", False):
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is logged as written
            message = str(record.msg)
        record.msg = scrub_log_text(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub_log_text(logging.Formatter().formatException(record.exc_info))
        record._secrets_scrubbed = True
        return True


class HealthAnswerFilter(logging.Filter):
    """Drops django.request's "Service Unavailable: /healthz" records."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        return not (getattr(record, "status_code", None) == 503
                    and getattr(request, "path", None) == "/healthz")
