"""``UPDATE ... RETURNING`` through the ORM: a write that also reads back what it wrote, in one
statement instead of an update and a select (PostgreSQL; SQLite from 3.35). Django compiles the
update (its expressions, its adaptation of values) and converts what comes back; only the
``RETURNING`` clause is added.

The hot writes of a turn (a step's event number, the trace's totals, its close) repeat a few
shapes thousands of times, and building and compiling the update cost several times running it.
So each shape (the model, the filter's fields, which values are set, added to or NULL, what
comes back) is compiled by the ORM once per process; later calls adapt their values as the
ORM adapts them (a field's ``get_db_prep_save``, an exact lookup's ``get_db_prep_value``) into
the kept SQL. The first compile checks that adaptation against the ORM's own parameters, and a
shape whose parameters it cannot reproduce (an expression, a model instance, a value the
backend adapts differently) is compiled by the ORM at every call, as before.

New rows go the same way (``insert``, ``create``): an ``INSERT ... RETURNING`` compiled once per
model and set of columns, the values adapted as ``Model.save`` adapts them; and a row stored or
updated where it exists (``upsert``: ``bulk_create``'s ``update_conflicts``) likewise.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

from django.db import DatabaseError, connections, transaction
from django.db.models import F, Field, Model, Value, signals
from django.db.models.constants import OnConflict
from django.db.models.expressions import CombinedExpression
from django.db.models.sql import InsertQuery, UpdateQuery

M = TypeVar("M", bound=Model)

# Shapes kept per process: a turn's writes have a handful; past this, the ORM compiles.
SHAPES = 256


def update_returns_rows(using: str = "default") -> bool:
    """Whether the database answers ``UPDATE ... RETURNING``."""
    vendor = connections[using].vendor
    return vendor == "postgresql" or (vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 35))


@dataclass(frozen=True)
class _Kept:
    sql: str
    # Per parameter, the backend's own type for it where it is not the adapted value's (psycopg's
    # typed ints), else None.
    wraps: tuple[type | None, ...]
    converters: tuple[tuple[int, list[Any], Any], ...]


_kept: dict[tuple[Any, ...], _Kept | None] = {}
_lock = threading.Lock()


def update_returning(model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any],
                     returning: Sequence[str], *, using: str = "default") -> dict[str, Any] | None:
    """``model.objects.filter(**where).update(**values)``, returning the named fields of the
    updated row as they are after it (None when no row matched; more than one is a
    ``ValueError``). For an update of one row of one table, by a filter of equalities on the
    model's own columns. With a database that cannot (``update_returns_rows``), an update and
    then a read of that row."""
    rows = model._base_manager.using(using)
    if not update_returns_rows(using):
        matched = list(rows.filter(**where).values_list("pk", flat=True)[:2])
        if len(matched) != 1 or not rows.filter(pk=matched[0], **where).update(**values):
            return None
        return rows.filter(pk=matched[0]).values(*returning).get()
    connection = connections[using]
    shape = _shape(model, where, values, returning, using)
    kept = _kept.get(shape) if shape is not None else None
    if kept is not None:
        params = [param if wrap is None else wrap(param)
                  for param, wrap in zip(_params(model, where, values, connection), kept.wraps, strict=True)]
        sql, converters = kept.sql, kept.converters
    else:
        sql, params, converters = _compiled(model, where, values, returning, using)
        if shape is not None and shape not in _kept:
            _keep(shape, model, where, values, connection, sql, params, converters)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    if not found:
        return None
    if len(found) > 1:
        raise ValueError(f"update_returning updated {len(found)} rows of {model.__name__}, not one")
    row = list(found[0])
    for position, functions, expression in converters:
        for convert in functions:
            row[position] = convert(row[position], expression, connection)
    return dict(zip(returning, row, strict=True))


def _added(name: str, value: Any) -> Any:
    """The amount of ``F(name) + amount``, or None when ``value`` is not that."""
    if (isinstance(value, CombinedExpression) and value.connector == "+" and isinstance(value.lhs, F)
            and value.lhs.name == name and isinstance(value.rhs, Value)):
        return value.rhs.value
    return None


def _shape(model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any],
           returning: Sequence[str], using: str) -> tuple[Any, ...] | None:
    """What the SQL depends on, or None when a value is one this module does not adapt itself."""
    filters = []
    for name, value in where.items():
        if value is not None and (hasattr(value, "resolve_expression") or isinstance(value, Model | list | tuple)):
            return None
        filters.append((name, value is None))
    changes = []
    for name, value in values.items():
        amount = _added(name, value)
        if amount is not None:
            changes.append((name, "add", type(amount)))
        elif value is None:
            changes.append((name, "null", None))
        elif hasattr(value, "resolve_expression") or hasattr(value, "prepare_database_save"):
            return None
        else:
            changes.append((name, "set", None))
    return (using, model, tuple(sorted(filters)), tuple(changes), tuple(returning))


_VALUE_FIELDS: dict[type, Field] = {}


def _value_field(value: Any) -> Field:
    """The field ``Value(value)`` is adapted as: its output field, which depends on the value's
    type only (made once per type, not per call)."""
    field = _VALUE_FIELDS.get(type(value))
    if field is None:
        field = _VALUE_FIELDS[type(value)] = Value(value).output_field
    return field


def _params(model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any],
            connection: Any) -> list[Any]:
    """The update's parameters as the ORM adapts them: the values set, in their order, then
    the filter's (the ORM sorts a filter's keywords)."""
    meta = model._meta
    params = []
    for name, value in values.items():
        amount = _added(name, value)
        if amount is not None:
            params.append(_value_field(amount).get_db_prep_value(amount, connection=connection))
        elif value is not None:
            params.append(meta.get_field(name).get_db_prep_save(value, connection=connection))
    for name in sorted(where):
        value = where[name]
        if value is not None:
            field = meta.pk if name == "pk" else meta.get_field(name)
            params.append(field.get_db_prep_value(field.get_prep_value(value), connection, prepared=True))
    return params


def _compiled(model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any],
              returning: Sequence[str], using: str) -> tuple[str, list[Any], tuple[Any, ...]]:
    """The ORM's SQL and parameters for the update, with its ``RETURNING`` clause, and the
    converters of what comes back."""
    connection = connections[using]
    rows = model._base_manager.using(using).filter(**where)
    query = rows.query.chain(UpdateQuery)
    query.add_update_values(values)
    sql, params = query.get_compiler(using).as_sql()
    fields = [model._meta.get_field(name) for name in returning]
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    reading = rows.query.get_compiler(using)
    converters = reading.get_converters([field.get_col(model._meta.db_table) for field in fields])
    return (f"{sql} RETURNING {columns}", list(params),
            tuple((position, functions, expression) for position, (functions, expression) in converters.items()))


def _keep(shape: tuple[Any, ...], model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any],
          connection: Any, sql: str, params: list[Any], converters: tuple[Any, ...]) -> None:
    """Keep the shape's SQL when this module's adaptation gives the ORM's own parameters; mark
    it as the ORM's to compile otherwise."""
    try:
        mine = _params(model, where, values, connection)
    except Exception:  # noqa: BLE001 - whatever fails here is the ORM's to do, at every call
        mine = None
    wraps = _wraps(mine, params)
    kept = None if wraps is None else _Kept(sql=sql, wraps=wraps, converters=converters)
    with _lock:
        if len(_kept) < SHAPES:
            _kept[shape] = kept


def _wraps(mine: Sequence[Any] | None, theirs: Sequence[Any]) -> tuple[type | None, ...] | None:
    """Per parameter, the backend's own type that the ORM gave it where ours differs (psycopg's
    typed ints), or None; None for all when ``mine`` is not the ORM's ``theirs``."""
    if mine is None or len(mine) != len(theirs):
        return None
    wraps: list[type | None] = []
    for ours, orms in zip(mine, theirs, strict=True):
        wrap = None if type(ours) is type(orms) else type(orms)
        if wrap is not None and (isinstance(ours, bool) or not isinstance(ours, int)):
            return None  # only an int may take the backend's own int type
        if not _equal(ours if wrap is None else wrap(ours), orms):
            return None
        wraps.append(wrap)
    return tuple(wraps)


def _equal(ours: Any, orms: Any) -> bool:
    # psycopg's JSON adapter (``Jsonb``) has no equality of its own: its object and dumper are it.
    if type(ours) is type(orms) and hasattr(orms, "obj") and hasattr(orms, "dumps"):
        return bool(ours.obj == orms.obj and ours.dumps is orms.dumps)
    return bool(ours == orms)


# -- INSERT ... RETURNING -----------------------------------------------------------------------
@dataclass(frozen=True)
class _KeptInsert:
    sql: str
    wraps: tuple[type | None, ...]
    returning_params: tuple[Any, ...]
    returning: tuple[Field, ...]
    converters: tuple[tuple[int, list[Any], Any], ...]
    # Per column, its field's default (a constant, not a callable) and that value adapted, so
    # that a column left at its default is not adapted again at every insert.
    defaults: tuple[tuple[Any, Any], ...]


_NO_DEFAULT = object()
_IMMUTABLE = frozenset({type(None), bool, int, float, str, bytes, Decimal})
_kept_inserts: dict[tuple[Any, ...], _KeptInsert | None] = {}


def insert(obj: Model, *, using: str = "default") -> None:
    """``obj.save(force_insert=True)`` for a new row of one table (its primary key and the
    database's defaults set on ``obj`` from the same statement), compiled by the ORM once per
    model and set of columns. A model with parents, with ``pre_save`` or ``post_save``
    receivers, or a database that cannot return columns from an insert, is saved by the ORM."""
    model = type(obj)
    connection = connections[using]
    if (model._meta.parents or model._meta.order_with_respect_to
            or not connection.features.can_return_columns_from_insert
            or signals.pre_save.has_listeners(model) or signals.post_save.has_listeners(model)):
        obj.save(force_insert=True, using=using)
        return
    _insert(obj, using, None, lambda: obj.save(force_insert=True, using=using))


def upsert(obj: Model, *, unique: Sequence[str], update: Sequence[str], using: str = "default") -> None:
    """``bulk_create([obj], update_conflicts=True, unique_fields=unique, update_fields=update)``:
    a new row, or the ``update`` columns of the row it conflicts with on ``unique``; compiled by
    the ORM once per model and set of columns. As ``bulk_create``, it sends no signals and sets
    no primary key on ``obj``."""
    model = type(obj)

    def by_the_orm() -> None:
        model._base_manager.using(using).bulk_create([obj], update_conflicts=True, unique_fields=unique,
                                                     update_fields=update)

    if model._meta.parents or not connections[using].features.supports_update_conflicts_with_target:
        by_the_orm()
        return
    obj._prepare_related_fields_for_save(operation_name="bulk_create")
    _insert(obj, using, (tuple(unique), tuple(update)), by_the_orm)


def _insert(obj: Model, using: str, conflict: tuple[tuple[str, ...], tuple[str, ...]] | None,
            by_the_orm: Any) -> None:
    meta = type(obj)._meta
    connection = connections[using]
    if conflict is None:
        obj._prepare_related_fields_for_save(operation_name="save")
        if not obj._is_pk_set(meta):
            setattr(obj, meta.pk.attname, meta.pk.get_pk_value_on_save(obj))
    pk_set = obj._is_pk_set(meta)
    fields = [f for f in meta.local_concrete_fields if not f.generated and (pk_set or f is not meta.auto_field)]
    key = (using, type(obj), tuple(f.attname for f in fields), conflict)
    kept = _kept_inserts.get(key)
    if kept is None and key in _kept_inserts:  # the ORM's to compile: its values are not ours
        by_the_orm()
        return
    values = [f.pre_save(obj, True) for f in fields]  # as the ORM's insert does (auto_now_add ...)
    if any(hasattr(value, "resolve_expression") for value in values):
        by_the_orm()
        return
    if kept is None:
        params = [f.get_db_prep_save(value, connection=connection) for f, value in zip(fields, values, strict=True)]
        kept = _insert_kept(obj, key, fields, params, using, conflict)
        if kept is None:
            by_the_orm()
            return
    else:
        params = [adapted if value is default else f.get_db_prep_save(value, connection=connection)
                  for f, value, (default, adapted) in zip(fields, values, kept.defaults, strict=True)]
    params = [param if wrap is None else wrap(param) for param, wrap in zip(params, kept.wraps, strict=True)]
    with transaction.mark_for_rollback_on_error(using=using), connection.cursor() as cursor:
        cursor.execute(kept.sql, params)
        row = list(connection.ops.fetch_returned_insert_columns(cursor, kept.returning_params)
                   if kept.returning else ())
    for position, functions, expression in kept.converters:
        for convert in functions:
            row[position] = convert(row[position], expression, connection)
    for field, value in zip(kept.returning, row, strict=True):
        setattr(obj, field.attname, value)
    obj._state.adding = False
    obj._state.db = using


def _insert_kept(obj: Model, key: tuple[Any, ...], fields: list[Field], params: list[Any], using: str,
                 conflict: tuple[tuple[str, ...], tuple[str, ...]] | None) -> _KeptInsert | None:
    """The ORM's insert of ``obj`` (its upsert with ``conflict``: the unique and updated
    fields), compiled from the values ``pre_save`` gave (``raw``), kept for ``key`` when
    ``params`` are its parameters; None, and marked, otherwise."""
    meta = type(obj)._meta
    if conflict is None:
        query = InsertQuery(type(obj))
    else:
        unique, update = ([meta.get_field(meta.pk.name if name == "pk" else name) for name in names]
                          for names in conflict)
        query = InsertQuery(type(obj), on_conflict=OnConflict.UPDATE, update_fields=update, unique_fields=unique)
    query.insert_values(fields, [obj], raw=True)
    compiler = query.get_compiler(using=using)
    returning: tuple[Field, ...] = ()
    if conflict is None:
        compiler.returning_fields = meta.db_returning_fields
        returning = tuple(meta.db_returning_fields)
    [(sql, orms)] = compiler.as_sql()
    converters = compiler.get_converters([f.get_col(meta.db_table) for f in returning]) if returning else {}
    wraps = _wraps(params, orms)
    kept = None if wraps is None else _KeptInsert(
        sql=sql, wraps=wraps, returning_params=tuple(compiler.returning_params), returning=returning,
        converters=tuple((position, functions, expression) for position, (functions, expression) in converters.items()),
        defaults=tuple(_default(field, connections[using]) for field in fields))
    with _lock:
        if len(_kept_inserts) < SHAPES:
            _kept_inserts[key] = kept
    return kept


def _default(field: Field, connection: Any) -> tuple[Any, Any]:
    """The field's constant default and its adapted value (``_NO_DEFAULT`` for none, or for a
    default that could be changed in place, as a shared list could)."""
    if not field.has_default() or type(field.default) not in _IMMUTABLE:
        return _NO_DEFAULT, None
    try:
        return field.default, field.get_db_prep_save(field.default, connection=connection)
    except Exception:  # noqa: BLE001 - a default the field cannot adapt alone is adapted at each call
        return _NO_DEFAULT, None


def save_fields(obj: M, names: Sequence[str], *, using: str = "default") -> None:
    """``obj.save(update_fields=names)`` as one ``update_returning`` of its row (compiled once
    per model and set of fields); a model with parents or save receivers is saved by the ORM."""
    model = type(obj)
    meta = model._meta
    if meta.parents or signals.pre_save.has_listeners(model) or signals.post_save.has_listeners(model):
        obj.save(update_fields=names, using=using)
        return
    values = {}
    for name in names:
        field = meta.get_field(name)
        values[field.attname] = field.pre_save(obj, False)
    if update_returning(model, {"pk": obj.pk}, values, [meta.pk.attname], using=using) is None:
        raise DatabaseError("Save with update_fields did not affect any rows.")


def create(model: type[M], **values: Any) -> M:
    """``model.objects.create(**values)`` through ``insert``."""
    obj = model(**values)
    insert(obj)
    return obj
