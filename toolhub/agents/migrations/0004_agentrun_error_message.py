"""Why an agent run failed as a message beside its English text, read once from the stored
English as the invocations' errors are (runs' migration 0010, which holds the frozen forms)."""

import importlib

from django.db import migrations, models

errors = importlib.import_module("toolhub.runs.migrations.0010_invocation_error_message")


def convert_errors(apps, schema_editor):
    errors.convert(apps.get_model("agents", "AgentRun"))


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0003_agentrun_sends'),
        ('runs', '0010_invocation_error_message'),
    ]

    operations = [
        migrations.AddField(
            model_name='agentrun',
            name='error_message',
            field=models.JSONField(blank=True, default=dict),
        ),
        # Going back keeps `error`, the English text, which the code before read.
        migrations.RunPython(convert_errors, migrations.RunPython.noop),
    ]
