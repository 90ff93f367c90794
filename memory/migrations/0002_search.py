"""Full-text search for memory entries, per database (see ``memory/search.py``).

SQLite: an external-content FTS5 table over (key, content) with triggers that keep it in step
with every insert, update and delete (including bulk and cascading deletes), filled from the
rows that already exist. PostgreSQL: a GIN index on the same ``to_tsvector`` expression the
search queries use. Other databases: nothing (search falls back to LIKE).

On SQLite, a later migration that makes Django rebuild the memory_memoryentry table (most
ALTERs do) drops these triggers with the old table: such a migration must run SQLITE_DROP and
SQLITE_CREATE again after it."""

from django.db import migrations

SQLITE_CREATE = [
    """CREATE VIRTUAL TABLE memory_entry_fts USING fts5(
        key, content, content='memory_memoryentry', content_rowid='id',
        tokenize='porter unicode61')""",
    """CREATE TRIGGER memory_entry_fts_insert AFTER INSERT ON memory_memoryentry BEGIN
        INSERT INTO memory_entry_fts(rowid, key, content) VALUES (new.id, new.key, new.content);
    END""",
    """CREATE TRIGGER memory_entry_fts_delete AFTER DELETE ON memory_memoryentry BEGIN
        INSERT INTO memory_entry_fts(memory_entry_fts, rowid, key, content)
        VALUES ('delete', old.id, old.key, old.content);
    END""",
    """CREATE TRIGGER memory_entry_fts_update AFTER UPDATE OF key, content ON memory_memoryentry BEGIN
        INSERT INTO memory_entry_fts(memory_entry_fts, rowid, key, content)
        VALUES ('delete', old.id, old.key, old.content);
        INSERT INTO memory_entry_fts(rowid, key, content) VALUES (new.id, new.key, new.content);
    END""",
    "INSERT INTO memory_entry_fts(memory_entry_fts) VALUES ('rebuild')",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS memory_entry_fts_update",
    "DROP TRIGGER IF EXISTS memory_entry_fts_delete",
    "DROP TRIGGER IF EXISTS memory_entry_fts_insert",
    "DROP TABLE IF EXISTS memory_entry_fts",
]
PG_INDEX = "memory_entry_search"


def _pg_index():
    from django.contrib.postgres.indexes import GinIndex
    from django.contrib.postgres.search import SearchVector

    # The same expression as memory.search.search_vector(), or the index is not used.
    return GinIndex(SearchVector("key", "content", config="english"), name=PG_INDEX)


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for statement in SQLITE_CREATE:
            schema_editor.execute(statement)
    elif vendor == "postgresql":
        schema_editor.add_index(apps.get_model("memory", "MemoryEntry"), _pg_index())


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for statement in SQLITE_DROP:
            schema_editor.execute(statement)
    elif vendor == "postgresql":
        schema_editor.remove_index(apps.get_model("memory", "MemoryEntry"), _pg_index())


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards)]
