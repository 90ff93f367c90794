"""``UPDATE ... RETURNING`` through the ORM: a write that also reads back what it wrote, in one
statement instead of an update and a select (PostgreSQL; SQLite from 3.35). Django compiles the
update (its expressions, its adaptation of values) and converts what comes back; only the
``RETURNING`` clause is added."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections
from django.db.models import QuerySet
from django.db.models.sql import UpdateQuery


def update_returns_rows(using: str = "default") -> bool:
    """Whether the database answers ``UPDATE ... RETURNING``."""
    vendor = connections[using].vendor
    return vendor == "postgresql" or (vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 35))


def update_returning(rows: QuerySet, values: Mapping[str, Any],
                     returning: Sequence[str]) -> dict[str, Any] | None:
    """``rows.update(**values)``, returning the named fields of the updated row as they are
    after it (None when no row matched). For an update of one row of one table, as a filter on
    the model's own columns makes; with a database that cannot (``update_returns_rows``), an
    update and then a read of that row."""
    if not update_returns_rows(rows.db):
        matched = list(rows.values_list("pk", flat=True)[:2])
        if len(matched) != 1 or not rows.update(**values):
            return None
        return rows.model._base_manager.using(rows.db).filter(pk=matched[0]).values(*returning).get()
    connection = connections[rows.db]
    model = rows.model
    query = rows.query.chain(UpdateQuery)
    query.add_update_values(values)
    sql, params = query.get_compiler(rows.db).as_sql()
    fields = [model._meta.get_field(name) for name in returning]
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {columns}", params)
        found = cursor.fetchall()
    if not found:
        return None
    if len(found) > 1:
        raise ValueError(f"update_returning updated {len(found)} rows of {model.__name__}, not one")
    reading = rows.query.get_compiler(rows.db)
    converters = reading.get_converters([field.get_col(model._meta.db_table) for field in fields])
    row = next(reading.apply_converters(found, converters)) if converters else found[0]
    return dict(zip(returning, row, strict=True))
