# Memory per end user of an API key: the end user's entries apart from the person's own and from
# each other's. On SQLite adding the column rebuilds the table, which drops the full-text
# triggers with the old table (see 0002_search): they are made again, and the index rebuilt.

import importlib

from django.conf import settings
from django.db import migrations, models

search = importlib.import_module("memory.migrations.0002_search")


def search_again(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for statement in [*search.SQLITE_DROP, *search.SQLITE_CREATE]:
            schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0014_end_users'),
        ('agentsite', '0004_api_keys'),
        ('memory', '0002_search'),
        ('traces', '0016_trace_team_conversation'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='memoryentry',
            name='memory_unique_user_key',
        ),
        migrations.RemoveIndex(
            model_name='memoryentry',
            name='memory_team_agent_user',
        ),
        migrations.AddField(
            model_name='memoryentry',
            name='end_user',
            field=models.CharField(blank=True, default='', help_text="The end user of the user's API key it is about; empty: the user themself.", max_length=256),
        ),
        migrations.AddIndex(
            model_name='memoryentry',
            index=models.Index(fields=['team', 'agent', 'user', 'end_user', '-updated_at'], name='memory_team_agent_end_user'),
        ),
        migrations.AddConstraint(
            model_name='memoryentry',
            constraint=models.UniqueConstraint(condition=models.Q(('scope', 'user')), fields=('team', 'agent', 'user', 'end_user', 'key'), name='memory_unique_user_key'),
        ),
        migrations.RunPython(search_again, search_again),
    ]
