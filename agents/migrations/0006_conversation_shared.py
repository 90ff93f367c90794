# A conversation is private to the person who started it (and the team's admins) until shared.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0005_durable_turns'),
    ]

    operations = [
        migrations.AddField(
            model_name='conversation',
            name='shared',
            field=models.BooleanField(default=False),
        ),
    ]
