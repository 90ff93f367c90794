"""Which exporter a team's turns go to: the team's own (``TraceExporter``), else the site's
default from the environment (``settings.OTEL_EXPORT_*``), else none.

Looked up on the turn's path (after every step), so the answer is kept per process for a few
seconds (``CACHE_S``): a change on the exporter page reaches running workers within that time.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from django.conf import settings

from ..models import TraceExporter
from .content import Policy

CACHE_S = 5.0
TRACES_PATH = "/v1/traces"


@dataclass(frozen=True, slots=True)
class ExportConfig:
    """Where one team's spans go. ``guarded``: the URL is a team's, so every request goes
    through the outbound-network policy (the operator's own endpoint is trusted)."""

    endpoint: str
    headers: tuple[tuple[str, str], ...] = ()
    content: str = "off"
    max_field_chars: int = 1000
    service_name: str = "agentsite"
    guarded: bool = True
    # Which row (or the site default) this is, and its version: a change makes a new pipeline.
    source: str = "site"
    version: str = ""
    policy: Policy = field(default_factory=Policy, compare=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.source, self.version, self.endpoint)


def traces_url(endpoint: str) -> str:
    """The traces URL of an OTLP/HTTP endpoint: a base URL gets ``/v1/traces``, as the
    standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` does; a full traces URL is kept."""
    endpoint = endpoint.strip()
    path = urllib.parse.urlsplit(endpoint).path.rstrip("/")
    if path.endswith(TRACES_PATH):
        return endpoint
    return endpoint.rstrip("/") + TRACES_PATH


def parse_env_headers(text: str) -> tuple[tuple[str, str], ...]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``k=v`` pairs separated by commas, URL-encoded."""
    pairs = []
    for item in (text or "").split(","):
        name, sep, value = item.partition("=")
        if sep and name.strip():
            pairs.append((urllib.parse.unquote(name.strip()), urllib.parse.unquote(value.strip())))
    return tuple(pairs)


def site_config() -> ExportConfig | None:
    if settings.OTEL_SDK_DISABLED or not settings.OTEL_EXPORT_ENDPOINT:
        return None
    return ExportConfig(endpoint=traces_url(settings.OTEL_EXPORT_ENDPOINT),
                        headers=parse_env_headers(settings.OTEL_EXPORT_HEADERS),
                        content=settings.OTEL_EXPORT_CONTENT, service_name=settings.OTEL_SERVICE_NAME,
                        guarded=False, source="site", version="env",
                        policy=Policy(settings.OTEL_EXPORT_CONTENT))


def team_config(row: TraceExporter) -> ExportConfig | None:
    """The config of a team's row; None when it is switched off. Raises ``SecretUnreadable``
    when its headers cannot be decrypted."""
    if not row.enabled or settings.OTEL_SDK_DISABLED:
        return None
    return ExportConfig(endpoint=traces_url(row.endpoint), headers=tuple(row.headers().items()),
                        content=row.content, max_field_chars=row.max_field_chars,
                        service_name=row.service_name or "agentsite", guarded=True,
                        source=f"team:{row.team_id}", version=row.updated_at.isoformat(),
                        policy=Policy(row.content, row.max_field_chars))


_cache: dict[int, tuple[float, ExportConfig | None]] = {}
_lock = threading.Lock()


def config_for(team_id: int) -> ExportConfig | None:
    """The exporter of ``team_id``'s turns, or None (kept ``CACHE_S`` seconds)."""
    now = time.monotonic()
    with _lock:
        hit = _cache.get(team_id)
    if hit is not None and now - hit[0] < CACHE_S:
        return hit[1]
    row = TraceExporter.objects.filter(team_id=team_id).first()
    try:
        config = team_config(row) if row is not None else site_config()
    except Exception:  # noqa: BLE001 - an unreadable secret stops the export, never the turn
        config = None
    with _lock:
        _cache[team_id] = (now, config)
    return config


def export_on(team_id: int) -> bool:
    """Whether the team's turns are exported (the ``sampled`` flag of outgoing trace context)."""
    return config_for(team_id) is not None


def forget(team_id: int | None = None) -> None:
    """Drop what is kept (after a change in this process; tests)."""
    with _lock:
        if team_id is None:
            _cache.clear()
        else:
            _cache.pop(team_id, None)
