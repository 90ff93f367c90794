"""The global price table shipped with agentsite: a snapshot of the community model catalogue
(``traces/costs/catalogue/snapshot.json``: OpenAI, Anthropic and Google chat models, with prices
and context windows, its source and the date it was read) and one hand-written row, the
offline demo model's free price.

A new database gets both (migrations 0004 and 0005, and ``TracesConfig``'s ``post_migrate``
handler when the global table is empty after a migrate: a flushed database). An upgraded
database gets the snapshot through the same plan as any catalogue import: new models added,
changed prices as new versions, nothing of a team's touched. Refresh the snapshot with
``manage.py catalogue_import <file-or-URL> --write-snapshot traces/costs/catalogue/snapshot.json``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ..models import ModelPrice
from .catalogue import snapshot_apply
from .catalogue.plan import FIRST_PRICE_FROM, edited_now

# The offline demo model runs locally: free, and said so, rather than "unpriced". Other model
# names on the demo provider stay unpriced until a team prices them.
DEMO_PRICE: dict[str, Any] = {
    "provider_kind": "demo", "vendor": "", "model": "demo", "aliases": ["demo-fast", "demo-careful"],
    "input_per_mtok": Decimal(0), "output_per_mtok": Decimal(0), "cache_write_per_mtok": Decimal(0),
    "cache_read_per_mtok": Decimal(0), "effective_from": FIRST_PRICE_FROM,
    "source_url": "", "label": "free (offline demo)",
    "source_note": "The offline demo model runs on this server and costs nothing.",
}
# What the chat's meter shows for the demo model (it keeps a short history on purpose).
DEMO_LIMITS = {"context_window": 8192}


def price_seed_apply(model_price: Any) -> int:
    """The demo model's free row, unless the global table has it; returns how many rows were
    added. ``model_price`` is the model class (a migration passes its historical one)."""
    existing = model_price.objects.filter(team__isnull=True, provider_kind="demo", model="demo")
    if existing.filter(effective_from=DEMO_PRICE["effective_from"]).exists():
        return 0
    version = max(existing.values_list("version", flat=True), default=0) + 1
    model_price.objects.create(team=None, version=version, **DEMO_PRICE)
    return 1


def catalogue_seed(model_price: Any) -> int:
    """The demo row and the shipped snapshot (with the demo model's limits); how many price
    rows were added."""
    added = price_seed_apply(model_price)
    model_price.objects.filter(team__isnull=True, provider_kind="demo", model="demo",
                               context_window__isnull=True).update(**DEMO_LIMITS, **edited_now(model_price))
    return added + len(snapshot_apply(model_price).created)


def price_seed_if_empty(**kwargs: Any) -> None:
    """``post_migrate``: a database without any global price (flushed by a test run) gets the
    shipped table."""
    if not ModelPrice.objects.filter(team__isnull=True).exists():
        catalogue_seed(ModelPrice)
