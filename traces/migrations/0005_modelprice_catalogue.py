"""Context windows and catalogue provenance on prices, and the shipped catalogue snapshot: a new
database gets it whole; an upgraded one through the importer's plan (new models added, a changed
price as a new version from now, limits filled in, nothing of a team's touched)."""

from django.db import migrations, models


def forwards(apps, schema_editor):
    from traces.costs.price_seed import catalogue_seed

    catalogue_seed(apps.get_model("traces", "ModelPrice"))


class Migration(migrations.Migration):

    dependencies = [
        ('traces', '0004_seed_prices_and_ledger'),
    ]

    operations = [
        migrations.AddField(
            model_name='modelprice',
            name='catalogue_read_at',
            field=models.DateTimeField(blank=True, help_text='When the catalogue was read.', null=True),
        ),
        migrations.AddField(
            model_name='modelprice',
            name='catalogue_source',
            field=models.CharField(blank=True, help_text='The catalogue this row was imported from (URL or file).', max_length=300),
        ),
        migrations.AddField(
            model_name='modelprice',
            name='catalogue_version',
            field=models.CharField(blank=True, help_text="The catalogue's version, when known.", max_length=50),
        ),
        migrations.AddField(
            model_name='modelprice',
            name='context_window',
            field=models.PositiveIntegerField(blank=True, help_text='Tokens the model reads at most (its context window).', null=True),
        ),
        migrations.AddField(
            model_name='modelprice',
            name='max_output_tokens',
            field=models.PositiveIntegerField(blank=True, help_text='Tokens the model writes at most in one answer.', null=True),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
