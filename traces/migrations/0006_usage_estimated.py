"""How many model requests of a trace, and of each roll-up, had their tokens estimated (the
server reported no usage, or the stream was cut off before it did), counted from the steps
already flagged."""

from django.db import migrations, models


def backfill(apps, schema_editor):
    from traces.costs.rollups import estimated_calls_backfill

    estimated_calls_backfill(models=(apps.get_model("traces", "Trace"),
                                     apps.get_model("traces", "Step"),
                                     apps.get_model("traces", "CostRollup"),
                                     apps.get_model("traces", "ConversationCostRollup")))


class Migration(migrations.Migration):

    dependencies = [
        ('traces', '0005_modelprice_catalogue'),
    ]

    operations = [
        migrations.AddField(
            model_name='conversationcostrollup',
            name='estimated_calls',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='costrollup',
            name='estimated_calls',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='trace',
            name='estimated_calls',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
