"""Context windows, longest answers and capabilities per provider and per model, in fields and
rows of their own (they lived in ``Provider.capabilities``, where a save of the provider form
erased them); how an assistant message ended (``Message.outcome``)."""

import django.core.validators
import django.db.models.deletion
import django.db.models.functions.text
from django.db import migrations, models


def move_windows(apps, schema_editor):
    from agents.models.legacy_windows import legacy_windows_move

    legacy_windows_move(provider_model=apps.get_model("agents", "Provider"),
                        model_row_model=apps.get_model("agents", "ProviderModel"))


def restore_windows(apps, schema_editor):
    from agents.models.legacy_windows import legacy_windows_restore

    legacy_windows_restore(provider_model=apps.get_model("agents", "Provider"),
                           model_row_model=apps.get_model("agents", "ProviderModel"))


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0003_chat_branches'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='outcome',
            field=models.CharField(blank=True, choices=[('', 'Complete'), ('length', 'Cut off (output limit)'), ('refusal', 'Refused'), ('filtered', 'Stopped by the content filter'), ('interrupted', 'Interrupted')], default='', max_length=16),
        ),
        migrations.AddField(
            model_name='provider',
            name='context_window',
            field=models.PositiveIntegerField(blank=True, help_text="Tokens the models of this provider read at most. Empty: the model's own, from the catalogue.", null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='provider',
            name='max_output_tokens',
            field=models.PositiveIntegerField(blank=True, help_text="Longest answer per model request, unless the agent sets its own. Empty: the server's default.", null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.CreateModel(
            name='ProviderModel',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('model', models.CharField(help_text='The model name, as the agents use it.', max_length=200)),
                ('context_window', models.PositiveIntegerField(blank=True, help_text="Tokens the model reads at most. Empty: the provider's setting.", null=True, validators=[django.core.validators.MinValueValidator(1)])),
                ('max_output_tokens', models.PositiveIntegerField(blank=True, help_text="Longest answer per request. Empty: the provider's setting.", null=True, validators=[django.core.validators.MinValueValidator(1)])),
                ('native_tool_calling', models.BooleanField(blank=True, null=True)),
                ('vision', models.BooleanField(blank=True, null=True)),
                ('prompt_caching', models.BooleanField(blank=True, null=True)),
                ('streaming', models.BooleanField(blank=True, null=True)),
                ('provider', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='model_settings', to='agents.provider')),
            ],
            options={
                'ordering': ['provider_id', 'model'],
                'constraints': [models.UniqueConstraint(django.db.models.functions.text.Lower('model'), models.F('provider'), name='providermodel_unique_model')],
            },
        ),
        migrations.RunPython(move_windows, restore_windows),
    ]
