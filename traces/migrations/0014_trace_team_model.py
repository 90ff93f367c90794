# The trace list's model filter, and its menu of the team's models (one index step per model).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('traces', '0013_modelprice_updated_at'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='trace',
            index=models.Index(fields=['team', 'model'], name='trace_team_model'),
        ),
    ]
