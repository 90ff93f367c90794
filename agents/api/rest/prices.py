"""``/api/v1/prices``: the price table the team's costs are computed with (any valid key): the
rows in force now of the global table and of the team's own, in US dollars per million tokens.
How a model name finds its row is ``traces.costs.pricing``; a row never changes, a new price is a
new version."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from agents.api.errors import errors
from agents.api.rest.pagination import PageParams, paginate_list
from traces.costs.pricing import PriceRow, price_table_for
from traces.json_values import usd
from traces.models import ModelPrice

router = Router(tags=["prices"])


class PriceOut(Schema):
    """Rates in US dollars per million tokens, as decimal strings."""

    id: str
    scope: str = Field(description="global (the site's table) or team (the team's own price).")
    provider_kind: str = Field(description="Only for providers of this kind; empty for any kind.")
    vendor: str
    model: str
    aliases: list[str]
    prefix: bool = Field(description="Also prices every model name that starts with this one.")
    input_per_mtok: str
    output_per_mtok: str
    cache_write_per_mtok: str = Field(description="The rate applied: the input rate when the row sets none.")
    cache_read_per_mtok: str = Field(description="The rate applied: the input rate when the row sets none.")
    effective_from: datetime
    version: int
    label: str
    source_url: str
    context_window: int | None
    max_output_tokens: int | None


class PricePage(Schema):
    data: list[PriceOut]
    next_cursor: str | None


def price_out(row: PriceRow, code: Any) -> dict[str, Any]:
    price = row.price
    return {
        "id": str(code), "scope": row.scope, "provider_kind": row.provider_kind, "vendor": row.vendor,
        "model": row.model, "aliases": list(row.aliases), "prefix": row.prefix,
        "input_per_mtok": usd(price.input), "output_per_mtok": usd(price.output),
        "cache_write_per_mtok": usd(price.cache_write), "cache_read_per_mtok": usd(price.cache_read),
        "effective_from": row.effective_from, "version": row.version, "label": row.label,
        "source_url": row.source_url, "context_window": row.context_window, "max_output_tokens": row.max_output_tokens,
    }


@router.get("", response={200: PricePage, **errors(400)}, summary="List the prices in force")
def price_list(request: HttpRequest, page: Query[PageParams]) -> dict[str, Any]:
    """The prices in force now for the team's model requests, newest row first. Any scope."""
    rows = price_table_for(request.team.pk).current_rows(team_id=request.team.pk)
    found, next_cursor = paginate_list(rows, page, key=lambda row: row.id)
    codes = dict(ModelPrice.objects.filter(pk__in=[r.id for r in found]).values_list("pk", "uuid"))
    return {"data": [price_out(r, codes[r.id]) for r in found], "next_cursor": next_cursor}
