"""A revision's status detail as a message (a code and its parameters, toolhub.messages) beside
its English text. Existing details are read once with the English forms they were written in;
the forms are copied here as they were, since the app's own may change after this migration.
Text of no known form is kept as written."""

import re

from django.db import migrations, models

# (code, English form); of two forms that could both match, the more specific comes first.
FORMS = [
    ("approval.waiting", "Waiting for an admin to approve: %(names)s"),
    ("build.queued", "Queued for build"),
    ("build.locking", "Locking the requirements"),
    ("build.environment", "Building the environment"),
    ("build.inspecting", "Inspecting the tools in the sandbox"),
    ("build.interrupted", "The build was interrupted (its worker stopped); press Retry to build again."),
    ("build.not_taken", "No worker took the build although its task was sent %(sends)s times (is a worker serving the %(queue)s queue?); press Retry to build again."),
    ("build.overdue", "The build made no progress for longer than a build may take; press Retry to build again."),
    ("build.queue_failed", "No worker could take the build (the broker is unavailable); press Retry once it is back."),
    ("package.rejected_because", "package %(name)s was rejected: %(reason)s"),
    ("package.rejected", "package %(name)s was rejected"),
    ("build.timed_out", "build timed out after %(seconds)s s"),
    ("build.internal_error", "internal error during build (%(error)s); see the worker log"),
    ("introspection.load_failed", "Loading the toolkit failed: %(error)s"),
    ("introspection.refused", "The toolkit's introspection was refused: %(error)s."),
    ("introspection.internal_error", "Internal error while inspecting the toolkit (%(error)s); see the worker log."),
    ("sandbox.not_loaded", "the toolkit could not be loaded"),
    ("sandbox.timed_out", "the sandbox ran out of time"),
    ("sandbox.limit", "a sandbox limit was hit (%(limit)s)"),
    ("sandbox.crashed", "the sandbox process ended unexpectedly (exit code %(code)s)"),
    ("step.index_unreachable", "index unreachable: %(where)s"),
    ("step.hash_mismatch", "hash mismatch for %(name)s: the index serves other files than the lock names"),
    ("step.no_distribution_constrained", "No matching distribution for %(name)s (constrained to %(limits)s)"),
    ("step.no_distribution", "No matching distribution for %(name)s"),
    ("step.constraint_contradicts_requirement", "constraint %(constraint)s contradicts requirement %(requirement)s"),
    ("step.constraint_contradicts_dependency", "constraint %(constraint)s contradicts %(who)s, which requires %(requirement)s"),
    ("step.package_build_failed_because", "%(name)s failed to build: %(detail)s"),
    ("step.package_build_failed", "%(name)s failed to build"),
    ("step.download_limit", "%(tool)s stopped at the build's download limit of %(size)s"),
    ("step.connection_limit", "%(tool)s opened more than %(count)s connections at once through the build's egress proxy"),
    ("step.failed", "%(tool)s failed: %(error)s"),
    ("step.exited", "%(tool)s exited with status %(status)s"),
    ("review.waiting", "Waiting for an admin to review it: it would receive %(what)s."),
    ("review.secrets_and_grant", "the secret Valves %(names)s and the network egress grant"),
    ("review.secrets", "the secret Valves %(names)s"),
    ("review.grant", "the network egress grant"),
    ("review.rejected", "Rejected in review by %(admin)s: %(reason)s"),
    ("tests.running", "Running its %(n)s tests"),
    ("tests.failed", "%(failed)s of its %(total)s tests failed (%(names)s); an admin may still approve it."),
    ("tests.worker_stopped", "The worker running these tests stopped before they finished."),
    ("tests.internal_error", "Internal error while running the tests (%(error)s); see the worker log."),
]
# The parameters that hold a message of their own (the sandbox's reason, what a review is for);
# every other parameter is text as written.
NESTED = {("introspection.load_failed", "error"), ("review.waiting", "what")}
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def _pattern(form):
    pieces = _PLACEHOLDER.split(form)
    # split() alternates literal text and placeholder names.
    regex = "".join(re.escape(piece) if i % 2 == 0 else f"(?P<{piece}>.+?)" for i, piece in enumerate(pieces))
    return re.compile(regex, re.DOTALL)


PATTERNS = [(code, _pattern(form)) for code, form in FORMS]


def _as_written(text):
    return {"code": "as_written", "params": {"text": text}}


def _known(text):
    """The message of `text` when it has one of FORMS, else None."""
    for code, pattern in PATTERNS:
        match = pattern.fullmatch(text)
        if match:
            params = {
                name: (_known(value) or _as_written(value)) if (code, name) in NESTED else value
                for name, value in match.groupdict().items()
            }
            return {"code": code, "params": params}
    return None


def detail_message(text):
    """The stored message of a status detail: its form and parameters, a list of known forms
    joined with "; " (rejected packages), text of no known form as written, {} for none."""
    if not text:
        return {}
    known = [_known(part) for part in text.split("; ")]
    if len(known) == 1 or not all(known):
        # One message, whose parameters may hold "; " (an admin's reason).
        known = [_known(text)]
    if known[0] is None:
        return _as_written(text)
    # Rejected packages are always stored as a list, as the lifecycle writes them.
    if len(known) > 1 or known[0]["code"].startswith("package."):
        return {"code": "list", "params": {"items": known}}
    return known[0]


def convert_details(apps, schema_editor):
    Revision = apps.get_model("toolkits", "Revision")
    for pk, text in Revision.objects.exclude(status_detail="").values_list("pk", "status_detail").iterator():
        Revision.objects.filter(pk=pk).update(status_message=detail_message(text))


class Migration(migrations.Migration):

    dependencies = [
        ('toolkits', '0007_tool_tests'),
    ]

    operations = [
        migrations.AddField(
            model_name='revision',
            name='status_message',
            field=models.JSONField(blank=True, default=dict),
        ),
        # Going back keeps status_detail, the English text, which the code before read.
        migrations.RunPython(convert_details, migrations.RunPython.noop),
    ]
