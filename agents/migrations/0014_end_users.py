# The end user of an API key's application a conversation is for, and the index its lists use.

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0013_config_updated_at'),
        ('agentsite', '0004_api_keys'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='conversation',
            name='end_user',
            field=models.CharField(blank=True, default='', max_length=256),
        ),
        migrations.AddIndex(
            model_name='conversation',
            index=models.Index(condition=models.Q(('end_user', ''), _negated=True), fields=['team', 'created_by', 'end_user'], name='conversation_end_user'),
        ),
    ]
