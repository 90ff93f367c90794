# When configuration rows last changed, so each process can keep the configuration it read until it changes.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0012_agent_slug'),
    ]

    operations = [
        migrations.AddField(
            model_name='modelroute',
            name='updated_at',
            field=models.DateTimeField(auto_now=True),
        ),
        migrations.AddField(
            model_name='providermodel',
            name='updated_at',
            field=models.DateTimeField(auto_now=True),
        ),
        migrations.AddField(
            model_name='routingrule',
            name='updated_at',
            field=models.DateTimeField(auto_now=True),
        ),
    ]
