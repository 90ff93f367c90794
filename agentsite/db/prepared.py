"""Reads built with the ORM once per process, then run with new values: ``Prepared``.

The ORM builds and compiles a query anew at every call, and for the hot reads of a turn or a
page that costs more than running them: a trace read with its conversation and two subqueries
takes about 2 ms of CPU to build and compile, against a tenth of that to run on SQLite. A
``Prepared`` read is built once per database and shape (its first call), with a stand-in in
place of each value; the compiled SQL and the compiler's description of its columns are kept,
and each call swaps its own values into the kept parameters and runs it through the ORM's own
iteration (model instances, ``select_related`` objects, annotations, converters, ``values()``
rows, as the query would have made them).

Values are integers (ids, counts), UUIDs, dates, aware datetimes and text, as the build
function's annotations
say (integers when it has none); each is adapted for the database as the ORM adapts a field's
value. A value must reach the SQL as a parameter: the read is compiled twice with different
stand-ins, and one whose SQL differs (a value inlined, as a slice's bound is, or one the build
branches on) is refused. A value the SQL does not use in a shape (an admin's read that does not
filter by person) is simply not sent. Text must reach the SQL as it is (an exact match): one
that a lookup rewrites (``icontains`` wraps and escapes it) is refused.
"""

from __future__ import annotations

import copy
import inspect
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Generic, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.models import QuerySet
from django.db.models.sql.compiler import SQLCompiler

M = TypeVar("M")

# Stand-ins for the values while the read is compiled, two sets of them: integers no id or count
# of these tables nears, within every integer field's range (a value out of a field's range is
# not sent as a parameter: Django turns the lookup into always or never); UUIDs and dates no row
# holds.
_INT_STANDINS = (2_093_151_977, 2_071_290_112)  # odd and even
_UUID_STANDINS = (0x5F1E_0D2C_9A4B_4C33_8E7D_6B5A_4938_2716, 0x2A3B_4C5D_6E7F_4081_9293_A4B5_C6D7_E8F9)
_DATE_STANDINS = (date(2093, 5, 7), date(2087, 9, 13))
_DATETIME_STANDINS = (datetime(2093, 5, 7, 1, 2, 3, 456789, tzinfo=UTC),
                      datetime(2087, 9, 13, 4, 5, 6, 123456, tzinfo=UTC))
_TEXT_STANDINS = ("\x1fprepared-standin-a-", "\x1fprepared-standin-b-")
KINDS = (int, uuid.UUID, date, datetime, str)


def _standin(kind: type, index: int, which: int) -> Any:
    if kind is uuid.UUID:
        return uuid.UUID(int=_UUID_STANDINS[which] + index)
    if kind is date:
        return _DATE_STANDINS[which] + timedelta(days=index)
    if kind is datetime:
        return _DATETIME_STANDINS[which] + timedelta(seconds=index)
    if kind is str:
        return f"{_TEXT_STANDINS[which]}{index}"
    return _INT_STANDINS[which] + index


def _as_it_is(value: Any) -> Any:
    return value


def _uuid_hex(value: uuid.UUID) -> str:
    return value.hex


def _adapter(kind: type, connection: Any) -> Callable[[Any], Any]:
    """How the ORM hands a value of ``kind`` to the database (as a field's
    ``get_db_prep_value`` does)."""
    if kind is uuid.UUID and not connection.features.has_native_uuid_field:
        return _uuid_hex
    if kind is date:
        return connection.ops.adapt_datefield_value
    if kind is datetime:
        return connection.ops.adapt_datetimefield_value
    return _as_it_is


def _same(param: Any, adapted: Any) -> bool:
    if isinstance(adapted, int):  # PostgreSQL's backend may type an int (psycopg's ``Int8``)
        return isinstance(param, int) and not isinstance(param, bool) and param == adapted
    return type(param) is type(adapted) and param == adapted


@dataclass(frozen=True)
class _Compiled:
    queryset: QuerySet
    compiler: SQLCompiler  # as ``as_sql`` left it: its columns, converters' fields, klass_info
    sql: str
    params: tuple[Any, ...]
    # (position in params, index of the caller's value, what makes it a parameter)
    slots: tuple[tuple[int, int, Callable[[Any], Any]], ...]
    # The rows' converters (the columns' from the database's types), as ``results_iter`` asks
    # for them: one per column, found once.
    columns: int
    converters: dict[int, Any]


class Prepared(Generic[M]):
    """``build(*values, **shape)`` returns the queryset; ``prepared(*values, **shape)`` is its
    rows, as a list.

    ``build``'s positional parameters are the values (``KINDS``: ``int`` unless annotated),
    each used as a parameter of the SQL (a filter's value, an annotation's), never branched on.
    Its keyword-only parameters are the shape: what the SQL itself depends on (a ``LIMIT``, a
    branch); each shape is compiled once (up to ``SHAPES``, then the read is compiled at every
    call, as the ORM does)."""

    SHAPES = 32

    def __init__(self, build: Callable[..., QuerySet]) -> None:
        self._build = build
        parameters = [p for p in inspect.signature(build, eval_str=True).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._kinds = tuple(int if p.annotation is p.empty else p.annotation for p in parameters)
        unknown = [kind for kind in self._kinds if kind not in KINDS]
        if unknown:
            raise ImproperlyConfigured(f"{build.__qualname__}: values are int, UUID, date, datetime or str, not {unknown}")
        self._compiled: dict[tuple[Any, ...], _Compiled] = {}
        self._lock = threading.Lock()

    def __call__(self, *values: Any, using: str | None = None, **shape: Any) -> list[M]:
        compiled = self._compiled_for(using, shape)
        return list(_bound(compiled, self._params(compiled, values)))

    def sql(self, *values: Any, using: str | None = None, **shape: Any) -> tuple[str, tuple[Any, ...]]:
        """The read's SQL and parameters for ``values``, as ``Query.sql_with_params`` gives
        them: for a raw statement that embeds it (a subquery)."""
        compiled = self._compiled_for(using, shape)
        return compiled.sql, self._params(compiled, values)

    def _params(self, compiled: _Compiled, values: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(values) != len(self._kinds):
            raise TypeError(f"{self._build.__qualname__} takes {len(self._kinds)} value(s), not {len(values)}")
        for index, (value, kind) in enumerate(zip(values, self._kinds, strict=True)):
            if type(value) is not kind:  # bool for int, datetime for date, str for UUID: refused
                raise TypeError(f"{self._build.__qualname__}: value {index} is {type(value).__name__}, "
                                f"not {kind.__name__}")
        params = list(compiled.params)
        for position, index, make in compiled.slots:
            params[position] = make(values[index])
        return tuple(params)

    def get(self, *values: Any, using: str | None = None, **shape: Any) -> M:
        """The one row (the model's ``DoesNotExist`` or ``MultipleObjectsReturned`` otherwise,
        as ``QuerySet.get``)."""
        rows = self(*values, using=using, **shape)
        if len(rows) == 1:
            return rows[0]
        model = self._compiled_for(using, shape).queryset.model
        if not rows:
            raise model.DoesNotExist(f"{model._meta.object_name} matching query does not exist.")
        raise model.MultipleObjectsReturned(f"get() returned more than one {model._meta.object_name}")

    def first(self, *values: Any, using: str | None = None, **shape: Any) -> M | None:
        rows = self(*values, using=using, **shape)
        return rows[0] if rows else None

    def _compiled_for(self, using: str | None, shape: dict[str, Any]) -> _Compiled:
        key = (using or "default", *sorted(shape.items()))
        compiled = self._compiled.get(key)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(key) or self._compile(using, shape)
                if len(self._compiled) < self.SHAPES:
                    self._compiled[key] = compiled
        return compiled

    def _compile(self, using: str | None, shape: dict[str, Any]) -> _Compiled:
        (queryset, sql, params, compiler), (_, other_sql, other_params, _) = (
            self._compiled_with(which, using, shape) for which in (0, 1))
        if sql != other_sql or len(params) != len(other_params):
            raise ImproperlyConfigured(
                f"{self._build.__qualname__}: its SQL changes with its values (a value inlined, as a "
                "slice's bound is, or branched on): make that part of the shape")
        connection = connections[queryset.db]
        slots = []
        claimed: set[int] = set()
        for index, kind in enumerate(self._kinds):
            # A value reaches the parameters adapted, as a field's lookup adapts it, or as it
            # is (``RawSQL``'s parameters, which the driver adapts).
            for adapt in {_adapter(kind, connection), _as_it_is}:
                standins = [adapt(_standin(kind, index, which)) for which in (0, 1)]
                positions = [position for position, param in enumerate(params)
                             if _same(param, standins[0]) and position not in claimed]
                claimed.update(positions)
                if any(not _same(other_params[position], standins[1]) for position in positions):
                    raise ImproperlyConfigured(f"{self._build.__qualname__}: value {index} is not a "
                                               "parameter of its own")
                if kind is str and any(isinstance(param, str) and standins[0] in param and param != standins[0]
                                       for param in params):
                    raise ImproperlyConfigured(
                        f"{self._build.__qualname__}: text value {index} does not reach the SQL as it "
                        "is (a lookup rewrites it, as icontains does)")
                for position in positions:
                    wrap = type(params[position])  # psycopg's typed int, or the value's own type
                    make = adapt if wrap is type(standins[0]) else (lambda value, a=adapt, w=wrap: w(a(value)))
                    slots.append((position, index, make))
        columns = [selected[0] for selected in compiler.select[0:compiler.col_count]]
        return _Compiled(queryset=queryset, compiler=compiler, sql=sql, params=params, slots=tuple(slots),
                         columns=len(columns), converters=compiler.get_converters(columns))

    def _compiled_with(self, which: int, using: str | None, shape: dict[str, Any]
                       ) -> tuple[QuerySet, str, tuple[Any, ...], SQLCompiler]:
        queryset = self._build(*(_standin(kind, index, which) for index, kind in enumerate(self._kinds)), **shape)
        if using is not None:
            queryset = queryset.using(using)
        compiler = queryset.query.get_compiler(using=queryset.db)
        sql, params = compiler.as_sql()
        return queryset, sql, tuple(params), compiler


def _bound(compiled: _Compiled, params: tuple[Any, ...]) -> QuerySet:
    """A fresh queryset of the kept one whose compiler is the kept compiler, bound to this
    thread's connection, answering ``as_sql`` with the kept SQL and ``params``."""
    kept = compiled.queryset
    compiler = copy.copy(compiled.compiler)
    compiler.connection = connections[kept.db]
    compiler.as_sql = lambda *args, **kwargs: (compiled.sql, params)  # type: ignore[method-assign]
    compiler.get_converters = lambda expressions: (  # type: ignore[method-assign]
        compiled.converters if len(expressions) == compiled.columns
        else SQLCompiler.get_converters(compiler, expressions))
    query = copy.copy(kept.query)  # a shallow copy: only its compiler is its own
    query.get_compiler = lambda *args, **kwargs: compiler  # type: ignore[method-assign]
    # As ``QuerySet._clone``, without cloning the query (``copy.copy`` of a queryset would
    # evaluate it: its ``__getstate__`` fills the cache).
    bound = kept.__class__(model=kept.model, query=query, using=kept._db, hints=kept._hints)
    bound._sticky_filter = kept._sticky_filter
    bound._for_write = kept._for_write
    bound._prefetch_related_lookups = kept._prefetch_related_lookups[:]
    bound._known_related_objects = kept._known_related_objects
    bound._iterable_class = kept._iterable_class
    bound._fields = kept._fields
    return bound

