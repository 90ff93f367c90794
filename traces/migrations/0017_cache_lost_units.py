# What prompt-cache misses cost, kept in the cost ledger (it was computed on the costs page from a
# sample of the range's latest turns): each successful model request records its loss when it is
# priced, and the roll-ups sum it. Requests stored before get theirs here, added to the roll-ups
# they are already in.

from django.db import migrations, models

from traces.costs.cache_selectors import losses_backfill
from traces.costs.rollups import cache_lost_backfill


def backfill(apps, schema_editor):
    step = apps.get_model("traces", "Step")
    losses_backfill(step_model=step, price_model=apps.get_model("traces", "ModelPrice"))
    cache_lost_backfill(models=(step, apps.get_model("traces", "CostRollup"),
                                apps.get_model("traces", "ConversationCostRollup")))


class Migration(migrations.Migration):

    dependencies = [
        ('traces', '0016_trace_team_conversation'),
    ]

    operations = [
        migrations.AddField(
            model_name='conversationcostrollup',
            name='cache_lost_units',
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='costrollup',
            name='cache_lost_units',
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
