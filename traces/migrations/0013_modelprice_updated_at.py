# The price table's last change, so each process can keep the table it read until it changes.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('traces', '0012_trace_fork'),
    ]

    operations = [
        migrations.AddField(
            model_name='modelprice',
            name='updated_at',
            field=models.DateTimeField(auto_now=True),
        ),
    ]
