"""Cursor pagination for every list of the API: ``?cursor=…&limit=…`` in,
``{"data": [...], "next_cursor": "…" | null}`` out.

Rows are read in a fixed order of their primary key (newest first unless a list says
otherwise), so a cursor is the last key a page held: a page never repeats or skips a row when
rows are added meanwhile. The cursor is opaque to clients (the key, base64-encoded); one that
this API did not give out is a 400 naming ``cursor``."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db.models import Model, QuerySet
from ninja import Field, Schema

from agents.api.errors import ApiError

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_TAG = "c1:"

M = TypeVar("M", bound=Model)
T = TypeVar("T")


class PageParams(Schema):
    cursor: str | None = Field(None, description="The `next_cursor` of the previous page; empty for the first page.")
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description=f"Items per page, at most {MAX_LIMIT}.")


def cursor_encode(key: int) -> str:
    return base64.urlsafe_b64encode(f"{_TAG}{key}".encode()).decode().rstrip("=")


def cursor_decode(cursor: str | None) -> int | None:
    """The key a cursor holds (None for the first page); a cursor this API did not give out is
    a 400."""
    if not cursor:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not text.startswith(_TAG):
            raise ValueError(text)
        key = int(text[len(_TAG):])
        if key < 0:
            raise ValueError(text)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise ApiError(400, "The cursor is not valid. Pass the next_cursor of a previous page as is, "
                            "or leave it out for the first page.",
                       param="cursor", code="invalid_cursor") from exc
    return key


def paginate(queryset: QuerySet[M], page: PageParams, *, newest_first: bool = True) -> tuple[list[M], str | None]:
    """One page of ``queryset`` in primary-key order, and the cursor of the next (None at the
    end)."""
    after = cursor_decode(page.cursor)
    rows = queryset.order_by("-pk" if newest_first else "pk")
    if after is not None:
        rows = rows.filter(pk__lt=after) if newest_first else rows.filter(pk__gt=after)
    found = list(rows[: page.limit + 1])
    return _page(found, page.limit, key=lambda row: row.pk)


def paginate_list(items: Sequence[T], page: PageParams, *, key: Callable[[T], int]) -> tuple[list[T], str | None]:
    """The same over rows already in memory, newest (highest key) first."""
    after = cursor_decode(page.cursor)
    ordered = sorted(items, key=key, reverse=True)
    if after is not None:
        ordered = [item for item in ordered if key(item) < after]
    return _page(ordered[: page.limit + 1], page.limit, key=key)


def _page(found: list[Any], limit: int, *, key: Callable[[Any], int]) -> tuple[list[Any], str | None]:
    rows = found[:limit]
    more = len(found) > limit
    return rows, cursor_encode(key(rows[-1])) if more and rows else None
