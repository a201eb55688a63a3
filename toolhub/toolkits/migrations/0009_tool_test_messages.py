"""A tool test run's error and a case's message as messages (a code and its parameters,
toolhub.messages) beside their English text. Existing texts are read once with the English
forms the worker wrote them in; the forms are copied here as they were, since the app's own may
change after this migration. Text of no known form is kept as written."""

import importlib

from django.db import migrations, models

details = importlib.import_module("toolhub.toolkits.migrations.0008_revision_status_message")
# A run's error inside "The call failed: …" (the runs' frozen forms).
run_errors = importlib.import_module("toolhub.runs.migrations.0010_invocation_error_message")

# (code, English form); of two forms that could both match, the more specific comes first.
FORMS = [
    ("tests.expected_failure", "The call succeeded; it was expected to fail."),
    ("tests.error_lacks", "The error does not contain %(value)s."),
    ("tests.call_failed", "The call failed: %(error)s"),
    ("tests.equals_differs", "Check %(n)s (equals): the result differs."),
    ("tests.contains_missing", "Check %(n)s (contains): the result does not contain %(value)s."),
    ("tests.regex_timed_out", "Check %(n)s (regex): the regular expression ran longer than %(seconds)s s."),
    ("tests.regex_unmatched", "Check %(n)s (regex): the result does not match %(value)s."),
    ("tests.path_missing", "Check %(n)s (json_path): the result has nothing at %(path)s."),
    ("tests.path_differs", "Check %(n)s (json_path): the value at %(path)s differs."),
    ("tests.no_tool", "This revision has no tool named %(tool)s."),
    ("tests.unfinished", "The call did not finish."),
    ("tests.worker_stopped", "The worker running these tests stopped before they finished."),
    ("tests.not_taken", "No worker took these tests (is a worker serving the sandbox queue?)."),
    ("tests.internal_error", "Internal error while running the tests (%(error)s); see the worker log."),
    ("tests.replaced", "Replaced by a new run of the revision's tests."),
    ("tests.queue_failed", "No worker could take the tests (the broker is unavailable)."),
]
PATTERNS = [(code, details._pattern(form)) for code, form in FORMS]
BATCH = 1000


def test_message(text):
    """The stored message of a case's message or a test run's error: its form and parameters
    (the call's error inside "The call failed: …" as a run's error), text of no known form as
    written, {} for none."""
    if not text:
        return {}
    for code, pattern in PATTERNS:
        match = pattern.fullmatch(text)
        if match:
            params = {
                name: run_errors.error_message(value) if code == "tests.call_failed" else value
                for name, value in match.groupdict().items()
            }
            return {"code": code, "params": params}
    return details._as_written(text)


def convert(model, text, data):
    batch = []
    for row in model.objects.exclude(**{text: ""}).only("pk", text).iterator(chunk_size=BATCH):
        setattr(row, data, test_message(getattr(row, text)))
        batch.append(row)
        if len(batch) == BATCH:
            model.objects.bulk_update(batch, [data])
            batch = []
    model.objects.bulk_update(batch, [data])


def convert_messages(apps, schema_editor):
    convert(apps.get_model("toolkits", "ToolTestRun"), "error", "error_message")
    convert(apps.get_model("toolkits", "ToolTestResult"), "message", "message_data")


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0010_invocation_error_message'),
        ('toolkits', '0008_revision_status_message'),
    ]

    operations = [
        migrations.AddField(
            model_name='tooltestrun',
            name='error_message',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name='tooltestresult',
            name='message_data',
            field=models.JSONField(blank=True, default=dict),
        ),
        # Going back keeps the English texts, which the code before read.
        migrations.RunPython(convert_messages, migrations.RunPython.noop),
    ]
