"""Why an invocation failed as a message (a code and its parameters, toolhub.messages) beside its
English text. Existing errors are read once with the English forms the worker wrote them in;
the forms are copied here as they were, since the app's own may change after this migration.
A tool's own error, and any text of no known form, is kept as written. (The agents' migration
reads an agent run's error with `error_message` from here.)"""

import importlib
import re

from django.db import migrations, models

# The revision details' frozen forms: a build failure inside "could not be built: …".
details = importlib.import_module("toolhub.toolkits.migrations.0008_revision_status_message")

# (code, English form), as the runs' and the agent runs' workers wrote them; of two forms that
# could both match, the more specific comes first.
FORMS = [
    ("run.timed_out", "The tool ran longer than %(seconds)s s and was stopped."),
    ("run.too_many_event_bytes", "The tool sent more than %(count)s bytes of events and was stopped."),
    ("run.too_many_events", "The tool sent more than %(count)s events and was stopped."),
    ("run.sandbox_limit", "The tool hit a sandbox limit (%(limit)s) and was stopped."),
    ("run.internal_error", "Internal error in the worker (%(error)s)."),
    ("run.environment_failed_on", "The toolkit's environment could not be built on %(host)s: %(reason)s"),
    ("run.environment_failed", "The toolkit's environment could not be built: %(reason)s"),
    ("run.not_recorded", "The worker could not record the run: %(error)s"),
    ("run.queue_failed", "No worker could take the invocation (the broker is unavailable)."),
    ("run.not_taken", "No worker took this invocation although its task was sent %(count)s times (%(why)s)."),
    ("run.cancelled", "Cancelled by %(user)s."),
    ("agent.out_of_time", "The run used its %(seconds)s s and stops here."),
    ("agent.max_iterations", "The model was called max_iterations (%(count)s) times; the run stops here."),
    ("agent.out_of_tokens", "The run used its budget of %(count)s tokens and stops here."),
    ("agent.connection_deleted", "The model connection was deleted."),
    ("agent.environment_failed", "The strategy's environment could not be built: %(reason)s"),
    ("agent.model_failed", "The model call failed: %(error)s"),
    ("agent.strategy_failed", "The strategy failed: %(error)s"),
    ("agent.strategy_timed_out", "The strategy ran longer than %(seconds)s s of its own time."),
]
# Why no worker took an invocation (inside run.not_taken).
WHY = {
    "the workers were busy with other invocations": "run.workers_busy",
    "is a worker serving the sandbox queue?": "run.no_worker",
}
# The parameters that hold a build failure (a revision's detail); every other parameter but
# run.not_taken's `why` is text as written.
BUILD_REASONS = {("run.environment_failed_on", "reason"), ("run.environment_failed", "reason"),
                 ("agent.environment_failed", "reason")}
PATTERNS = [(code, details._pattern(form)) for code, form in FORMS]
BATCH = 1000


def _param(code, name, value):
    if (code, name) in BUILD_REASONS:
        return details._known(value) or details._as_written(value)
    if (code, name) == ("run.not_taken", "why"):
        return {"code": WHY[value], "params": {}} if value in WHY else details._as_written(value)
    return value


def error_message(text):
    """The stored message of a run's error: its form and parameters, text of no known form
    (a tool's own error) as written, {} for none."""
    if not text:
        return {}
    for code, pattern in PATTERNS:
        match = pattern.fullmatch(text)
        if match:
            return {"code": code, "params": {name: _param(code, name, value) for name, value in match.groupdict().items()}}
    return details._as_written(text)


def convert(model):
    """Store the message of every stored error of `model` (Invocation, AgentRun), in batches."""
    batch = []
    for row in model.objects.exclude(error="").only("pk", "error").iterator(chunk_size=BATCH):
        row.error_message = error_message(row.error)
        batch.append(row)
        if len(batch) == BATCH:
            model.objects.bulk_update(batch, ["error_message"])
            batch = []
    model.objects.bulk_update(batch, ["error_message"])


def convert_errors(apps, schema_editor):
    convert(apps.get_model("runs", "Invocation"))


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0009_usage_indexes'),
        ('toolkits', '0008_revision_status_message'),
    ]

    operations = [
        migrations.AddField(
            model_name='invocation',
            name='error_message',
            field=models.JSONField(blank=True, default=dict),
        ),
        # Going back keeps `error`, the English text, which the code before read.
        migrations.RunPython(convert_errors, migrations.RunPython.noop),
    ]
