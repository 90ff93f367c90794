# A member's traces (those of the conversations they may see), counted and listed from an index.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('traces', '0015_conversation_cost_index'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='trace',
            index=models.Index(fields=['team', 'conversation', '-created_at'], name='trace_team_conversation'),
        ),
    ]
