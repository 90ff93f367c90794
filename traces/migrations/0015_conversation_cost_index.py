# The costs page's most expensive conversations of a range, summed from an index alone.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('traces', '0014_trace_team_model'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='conversationcostrollup',
            index=models.Index(fields=['team', 'conversation_id', 'day', 'cost_units'], name='convcostrollup_team_conv_cost'),
        ),
    ]
