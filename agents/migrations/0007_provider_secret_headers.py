"""Provider extra headers: encrypted at rest and write-only like the API key (the values move
into ``extra_headers_encrypted``; their names stay readable in ``extra_header_names``)."""

import json

from django.db import migrations, models

from agentsite.crypto import encrypt


def encrypt_headers(apps, schema_editor):
    Provider = apps.get_model("agents", "Provider")
    for provider in Provider.objects.exclude(extra_headers={}).iterator():
        headers = provider.extra_headers if isinstance(provider.extra_headers, dict) else {}
        headers = {str(k): str(v) for k, v in headers.items()}
        provider.extra_header_names = sorted(headers)
        provider.extra_headers_encrypted = encrypt(json.dumps(headers)) if headers else ""
        provider.save(update_fields=["extra_header_names", "extra_headers_encrypted"])


class Migration(migrations.Migration):
    dependencies = [("agents", "0006_conversation_shared")]

    operations = [
        migrations.AddField(model_name="provider", name="extra_headers_encrypted",
                            field=models.TextField(blank=True, editable=False)),
        migrations.AddField(model_name="provider", name="extra_header_names",
                            field=models.JSONField(blank=True, default=list, editable=False)),
        migrations.RunPython(encrypt_headers, migrations.RunPython.noop),
        migrations.RemoveField(model_name="provider", name="extra_headers"),
    ]
