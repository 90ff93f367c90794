"""Full-text search over memory entries, one back-end per database.

* SQLite: an FTS5 table ``memory_entry_fts`` (``porter unicode61`` tokenizer) over each entry's
  key and content, kept in sync by triggers that the ``memory`` migrations create; candidates
  are ranked by ``bm25()``.
* PostgreSQL: ``to_tsvector('english', key || ' ' || content)`` with a GIN index on exactly that
  expression (created by the migrations); candidates are ranked by ``ts_rank``.
* Any other database: a ``LIKE`` search, ranked by how many query words match.

Both engines match any of the query's words (OR). Their raw ranks are not comparable: bm25 is
unbounded and depends on the whole table (with a single row its IDF is ~0), ts_rank is small and
depends on document length. So the back-end only picks and orders candidates, and the *score*
that ``min_relevance`` is compared with is computed here, the same way on every database:

    score = (query words found in the entry's key or content) / (query words)

Words are lowercased, split on anything that is not a letter or digit (so the key
``favourite_colour`` is the words "favourite" and "colour"), reduced by a light English
stemmer ("colours" = "colour"), and common stop words ("what", "is", "my") are dropped from the
query. A minimum relevance of 0.4 therefore means "at least 40 % of the query's words", on
SQLite and PostgreSQL alike. Equal scores are ordered by the back-end's rank.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet

from .models import MemoryEntry

MAX_TERMS = 16
_WORD = re.compile(r"[^\W_]+")
STOP_WORDS = frozenset("""
a about above after again all also am an and any are as at be been before being below between
both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just let me
more most my myself no nor not now of off on once only or other our ours ourselves out over own
please remember recall same she should so some such tell than that the their theirs them
themselves then there these they this those through to too under until up very was we were what
when where which while who whom why will with would you your yours yourself yourselves know
""".split())


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def stem(word: str) -> str:
    """A light English stemmer: enough to match plurals and common endings."""
    w = word.lower()
    if len(w) <= 3:
        return w
    for suffix, replacement in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("edly", ""),
                                ("ed", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            if suffix == "s" and w.endswith(("ss", "us", "is")):
                continue
            if suffix == "es" and not w.endswith(("ches", "shes", "xes", "zes", "sses")):
                w = w[:-1]  # "notes" -> "note"
                break
            w = w[: len(w) - len(suffix)] + replacement
            break
    return w


def search_terms(query: str) -> list[str]:
    """The query's meaningful words (no stop words, no repeats), at most ``MAX_TERMS``."""
    seen: dict[str, None] = {}
    for word in words(query):
        if word not in STOP_WORDS:
            seen.setdefault(word, None)
    return list(seen)[:MAX_TERMS]


def coverage(terms: list[str], text: str) -> float:
    """The share of ``terms`` found among the words of ``text`` (compared by stem)."""
    if not terms:
        return 0.0
    stems = {stem(w) for w in words(text)}
    found = sum(1 for t in terms if stem(t) in stems)
    return found / len(terms)


class SearchBackend:
    """Finds the entries of ``queryset`` that match any of ``terms``: ``(id, rank)`` pairs,
    best first, at most ``limit``. ``ids``: the SQL and parameters of the queryset's ids, when
    the caller has them compiled already (a backend that embeds them uses them, and is given
    no ``queryset`` then: ``filters_queryset`` False)."""

    vendor = ""
    filters_queryset = True

    def search(self, queryset: QuerySet | None, terms: list[str], limit: int,
               ids: tuple[str, Sequence[Any]] | None = None) -> list[tuple[int, float]]:
        raise NotImplementedError

    @staticmethod
    def ids_sql(queryset: QuerySet | None, ids: tuple[str, Sequence[Any]] | None) -> tuple[str, Sequence[Any]]:
        """The entries' ids as SQL and parameters: ``ids``, else the ORM's own SQL for
        ``queryset`` (its values as parameters), for a backend that embeds them."""
        if ids is not None:
            return ids
        if queryset is None:
            raise ValueError("the search needs the entries' ids or their queryset")
        return queryset.values("id").query.sql_with_params()


class Fts5Search(SearchBackend):
    vendor = "sqlite"
    filters_queryset = False

    def search(self, queryset: QuerySet | None, terms: list[str], limit: int,
               ids: tuple[str, Sequence[Any]] | None = None) -> list[tuple[int, float]]:
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        subquery, params = self.ids_sql(queryset, ids)
        sql = ("SELECT rowid, -bm25(memory_entry_fts) FROM memory_entry_fts "  # noqa: S608
               f"WHERE memory_entry_fts MATCH %s AND rowid IN ({subquery}) "
               "ORDER BY bm25(memory_entry_fts) LIMIT %s")
        with connection.cursor() as cursor:
            cursor.execute(sql, [match, *params, limit])
            return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]


class PostgresSearch(SearchBackend):
    vendor = "postgresql"
    filters_queryset = False

    def search(self, queryset: QuerySet | None, terms: list[str], limit: int,
               ids: tuple[str, Sequence[Any]] | None = None) -> list[tuple[int, float]]:
        with connection.cursor() as cursor:
            cursor.execute(*self.statement(terms, limit, self.ids_sql(queryset, ids)))
            return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]

    @staticmethod
    def statement(terms: list[str], limit: int, ids: tuple[str, Sequence[Any]]) -> tuple[str, list[Any]]:
        """``annotate(search=vector).filter(search=query)`` ranked by ``SearchRank``, as the ORM
        writes it, with the ids embedded (the ORM took ten times its running time to build it
        at every turn). Terms are letters and digits only, so joining them with | is a safe raw
        tsquery."""
        subquery, params = ids
        table, vector, vector_params = _vector_sql(connection.alias)
        query, query_params = "to_tsquery(%s::regconfig, %s)", ["english", " | ".join(terms)]
        sql = (f"SELECT id, ts_rank({vector}, {query}) AS rank FROM {table} "  # noqa: S608 - the model's table, the ORM's expression
               f"WHERE {vector} @@ {query} AND id IN ({subquery}) "
               "ORDER BY rank DESC, updated_at DESC, id DESC LIMIT %s")
        return sql, [*vector_params, *query_params, *vector_params, *query_params, *params, limit]


@functools.cache
def _vector_sql(alias: str) -> tuple[str, str, tuple[Any, ...]]:
    """The entries' table and ``search_vector()`` as the ORM compiles it there (the index's own
    expression): once per database."""
    query = MemoryEntry.objects.using(alias).annotate(search=search_vector()).query
    compiler = query.get_compiler(using=alias)
    sql, params = compiler.compile(query.annotations["search"])
    return compiler.connection.ops.quote_name(MemoryEntry._meta.db_table), sql, tuple(params)


class LikeSearch(SearchBackend):
    """For databases without a full-text engine here: rank = the number of matching words."""

    def search(self, queryset: QuerySet | None, terms: list[str], limit: int,
               ids: tuple[str, Sequence[Any]] | None = None) -> list[tuple[int, float]]:
        condition = Q()
        for term in terms:
            condition |= Q(content__icontains=term) | Q(key__icontains=term)
        rows = queryset.filter(condition).order_by("-updated_at", "-id").values_list(
            "id", "key", "content")[: limit * 4]
        ranked = [(i, float(sum(1 for t in terms if t in f"{k} {c}".lower())))
                  for i, k, c in rows]
        ranked.sort(key=lambda pair: -pair[1])
        return ranked[:limit]


def search_vector():
    """The expression the PostgreSQL GIN index (migration 0002) is built on; queries must use
    the same one for the index to be used."""
    from django.contrib.postgres.search import SearchVector

    return SearchVector("key", "content", config="english")


BACKENDS: dict[str, type[SearchBackend]] = {
    Fts5Search.vendor: Fts5Search,
    PostgresSearch.vendor: PostgresSearch,
}


def backend_for(vendor: str | None = None) -> SearchBackend:
    return BACKENDS.get(vendor or connection.vendor, LikeSearch)()
