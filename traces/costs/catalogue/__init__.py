"""The model catalogue: prices and limits of current models from the community-maintained
``model_prices_and_context_window.json`` (LiteLLM's format), imported into the global price
table with a preview first (``manage.py catalogue_import``, and the admin's "Import from the
community catalogue" on prices), and shipped as a snapshot (``snapshot.json``) that seeds a new
database.

``read``: the file (or our compact form of it) as entries in our units. ``plan``: what an
import would add, change (as new versions) or leave, and applying it to global rows only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.utils import timezone

from agentsite.outbound import OutboundFailed, OutboundRefused
from agentsite.outbound.document import DOCUMENT_MAX_BYTES, fetch_document

from .plan import Action, ApplyReport, Plan, PlanItem, catalogue_apply, catalogue_plan
from .read import COMPACT_FORMAT, Catalogue, CatalogueError, Entry, Skip, catalogue_read

SNAPSHOT_PATH = Path(__file__).with_name("snapshot.json")

__all__ = [
    "COMPACT_FORMAT", "SNAPSHOT_PATH", "Action", "ApplyReport", "Catalogue", "CatalogueError",
    "Entry", "Plan", "PlanItem", "Skip", "catalogue_apply", "catalogue_fetch", "catalogue_plan",
    "catalogue_read", "snapshot_apply", "snapshot_read",
]


def is_url(text: str) -> bool:
    return text.strip().lower().startswith(("https://", "http://"))


def catalogue_fetch(location: str, *, version: str = "") -> Catalogue:
    """The catalogue at a URL (through the outbound policy) or in a local file."""
    location = location.strip()
    if is_url(location):
        try:
            document = fetch_document(location, max_bytes=DOCUMENT_MAX_BYTES)
        except (OutboundRefused, OutboundFailed) as exc:
            raise CatalogueError(f"Could not fetch {location}: {exc}") from exc
        raw = document.content
    else:
        path = Path(location)
        try:
            if path.stat().st_size > DOCUMENT_MAX_BYTES:
                raise CatalogueError(f"{path.name} is larger than "
                                     f"{DOCUMENT_MAX_BYTES // (1024 * 1024)} MB.")
            raw = path.read_bytes()
        except OSError as exc:
            raise CatalogueError(f"Could not read {location}: {exc.strerror or exc}.") from exc
        location = path.name
    return catalogue_read(raw, source=location, version=version, read_at=timezone.now())


def snapshot_read() -> Catalogue:
    return catalogue_read(SNAPSHOT_PATH.read_bytes())


def snapshot_apply(model: Any = None) -> ApplyReport:
    """The shipped snapshot into the global table, through the same plan as any import: new
    models added, changed prices as new versions from now, nothing else touched."""
    return catalogue_apply(catalogue_plan(snapshot_read(), model=model), model=model)
