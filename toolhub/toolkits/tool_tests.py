"""Saved tool tests of a toolkit and their runs (docs/tool-tests.md): saving and deleting tests,
asking for a run, and reading them. Its owner and admins manage a toolkit's tests; the views and
the API check that (roles.can_manage_toolkit) before calling these. The lifecycle's gate run is
started by toolhub.toolkits.lifecycle; the worker's side is toolhub.runs.tool_tests."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from kombu.exceptions import OperationalError as BrokerError

from toolhub import broker
from toolhub.messages import message
from toolhub.toolkits.models import Revision, Status, Toolkit, ToolTest, ToolTestResult, ToolTestRun, ToolTestStatus
from toolhub.toolkits.tool_checks import MAX_VALUE_CHARS, CheckInvalid, clean_checks
from toolhub.toolkits.valves import vault

logger = logging.getLogger(__name__)

MAX_TESTS = 25
MAX_NAME_CHARS = 100
MAX_ARGUMENTS_CHARS = 16_000
# Runs asked for on demand kept per toolkit (gate runs stay: they hold the overrides).
KEEP_RUNS = 50
# Registered by toolhub.runs.tasks.
RUN_TASK = "toolhub.runs.tasks.tool_tests_run"
# Revisions whose tools are known: introspected, so a run can call them.
TESTABLE = (Status.READY, Status.AWAITING_REVIEW)


class ToolTestRefused(Exception):
    """Carries the HTTP status to answer with, the message and the field concerned."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


# ------------------------------------------------------------------------------------------
# Tests


def _clean(
    *, toolkit: Toolkit, name: object, tool: object, arguments: object, checks: object, user_valves: object = None
) -> dict[str, Any]:
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_NAME_CHARS:
        raise ToolTestRefused(400, _("Give the test a name of at most %(n)s characters.") % {"n": MAX_NAME_CHARS}, "name")
    revision = toolkit.current_revision
    known = set(revision.tool_names or []) if revision is not None else set()
    if not isinstance(tool, str) or tool not in known:
        raise ToolTestRefused(400, _("The toolkit's current revision has no tool of that name."), "tool")
    if not isinstance(arguments, dict):
        raise ToolTestRefused(400, _("The arguments must be a JSON object."), "arguments")
    if len(json.dumps(arguments, ensure_ascii=False)) > MAX_ARGUMENTS_CHARS:
        raise ToolTestRefused(400, _("The arguments are longer than %(n)s characters.") % {"n": MAX_ARGUMENTS_CHARS}, "arguments")
    if any(str(key).startswith("_") for key in arguments):
        raise ToolTestRefused(400, _("Names starting with an underscore are injected by ToolHub, not passed."), "arguments")
    try:
        cleaned = clean_checks(checks)
    except CheckInvalid as exc:
        raise ToolTestRefused(400, str(exc), exc.field) from None
    fields = {"name": name.strip(), "tool": tool, "arguments": arguments, "checks": cleaned}
    if user_valves:
        fields |= _clean_user_valves(revision, user_valves)
    return fields


def _clean_user_valves(revision: Revision | None, values: object) -> dict[str, Any]:
    """UserValves a test runs with: only settings the current revision's UserValves define;
    stored encrypted, and only their names in clear."""
    schema = (revision.user_valves_schema if revision is not None else None) or {}
    known = set((schema.get("properties") or {}).keys())
    if not isinstance(values, dict) or len(json.dumps(values, ensure_ascii=False)) > MAX_ARGUMENTS_CHARS:
        raise ToolTestRefused(400, _("The UserValves must be a JSON object of at most %(n)s characters.") % {"n": MAX_ARGUMENTS_CHARS}, "user_valves")
    unknown = sorted(set(values) - known)
    if unknown:
        raise ToolTestRefused(400, _("The toolkit's UserValves have no setting named %(names)s.") % {"names": ", ".join(unknown)[:300]}, "user_valves")
    return {"user_valves_ciphertext": vault().encrypt_json(values), "user_valve_names": sorted(values)}


def saved_user_valves(invocation_id: Any) -> dict[str, Any] | None:
    """The UserValves saved with the test whose call this invocation is (None when it has
    none): toolhub.runs.engine hands them to the sandbox instead of the invoker's own. Only
    to code their saver wrote or an admin uploaded or approved (Revision.entrusted): an owner
    could otherwise upload code that sends back the secrets an admin saved with a test."""
    case = (
        ToolTestResult.objects.filter(invocation_id=invocation_id)
        .select_related("test", "run__revision__uploaded_by")
        .first()
    )
    if case is None or case.test is None or not case.test.user_valves_ciphertext:
        return None
    revision = case.run.revision
    if case.test.created_by_id != revision.uploaded_by_id and not revision.entrusted:
        return None
    return vault().decrypt_json(case.test.user_valves_ciphertext)


def tool_test_create(
    *, toolkit: Toolkit, name: object, tool: object, arguments: object, checks: object, by: User,
    user_valves: object = None,
) -> ToolTest:
    """Save a test (with `user_valves`, UserValves to run with); raises ToolTestRefused (400
    for bad input, 409 for a taken name or a full list) and saves nothing then."""
    fields = _clean(toolkit=toolkit, name=name, tool=tool, arguments=arguments, checks=checks, user_valves=user_valves)
    with transaction.atomic():
        # Locked: two saves at once must not both pass the count.
        Toolkit.objects.select_for_update().filter(pk=toolkit.pk).first()
        if ToolTest.objects.filter(toolkit=toolkit).count() >= MAX_TESTS:
            raise ToolTestRefused(409, _("A toolkit has at most %(n)s tests; delete one first.") % {"n": MAX_TESTS})
        if ToolTest.objects.filter(toolkit=toolkit, name=fields["name"]).exists():
            raise ToolTestRefused(409, _("The toolkit already has a test of that name."), "name")
        try:
            with transaction.atomic():
                return ToolTest.objects.create(toolkit=toolkit, created_by=by, **fields)
        except IntegrityError:
            raise ToolTestRefused(409, _("The toolkit already has a test of that name."), "name") from None


def tool_test_delete(*, test: ToolTest) -> None:
    test.delete()


def tool_test_from_invocation(*, invocation: Any, by: User) -> ToolTest:
    """"Save as test" on a finished run: its tool and arguments, and a check that what it
    returned comes back (equals, or `contains` its start for a long result), or that it fails
    with the first line of its error."""
    if invocation.status == "succeeded":
        value = invocation.result
        if len(json.dumps(value, ensure_ascii=False)) <= MAX_VALUE_CHARS:
            checks = [{"kind": "equals", "value": value}]
        else:
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
            checks = [{"kind": "contains", "value": text[:1000]}]
    elif invocation.status in ("failed", "timed_out") and (invocation.error or "").strip():
        checks = [{"kind": "fails_with", "value": invocation.error.strip().splitlines()[0][:500]}]
    else:
        raise ToolTestRefused(409, _("Only a finished run can be saved as a test."))
    toolkit = invocation.toolkit
    taken = set(ToolTest.objects.filter(toolkit=toolkit, name__startswith=invocation.tool).values_list("name", flat=True))
    name = next(f"{invocation.tool} {n}"[:MAX_NAME_CHARS] for n in range(1, MAX_TESTS + 2) if f"{invocation.tool} {n}"[:MAX_NAME_CHARS] not in taken)
    return tool_test_create(
        toolkit=toolkit, name=name, tool=invocation.tool, arguments=dict(invocation.arguments or {}), checks=checks, by=by
    )


def tests_of(toolkit: Toolkit) -> QuerySet[ToolTest]:
    return ToolTest.objects.filter(toolkit=toolkit)


# ------------------------------------------------------------------------------------------
# Runs


def test_run_start(*, toolkit: Toolkit, revision: Revision, by: User) -> ToolTestRun:
    """Queue a run of the toolkit's tests against `revision` ("Run tests"): only results, the
    revision's state does not change. One run of a toolkit at a time."""
    if revision.status not in TESTABLE:
        raise ToolTestRefused(409, _("Only an introspected revision (ready or awaiting review) can be tested."))
    with transaction.atomic():
        Toolkit.objects.select_for_update().filter(pk=toolkit.pk).first()
        total = ToolTest.objects.filter(toolkit=toolkit).count()
        if not total:
            raise ToolTestRefused(409, _("The toolkit has no tests yet."))
        if ToolTestRun.objects.filter(toolkit=toolkit, status__in=[ToolTestStatus.QUEUED, ToolTestStatus.RUNNING]).exists():
            raise ToolTestRefused(409, _("The toolkit's tests are already running; wait until they finish."))
        run = ToolTestRun.objects.create(toolkit=toolkit, revision=revision, total=total, started_by=by)
        old = ToolTestRun.objects.filter(toolkit=toolkit, gate=False).values_list("pk", flat=True)[KEEP_RUNS:]
        ToolTestRun.objects.filter(pk__in=list(old)).delete()
    try:
        broker.send(RUN_TASK, run.pk)
    except (BrokerError, OSError) as exc:
        logger.error("could not queue test run %s: %s", run.pk, exc)
        ToolTestRun.objects.filter(pk=run.pk).update(
            status=ToolTestStatus.FAILED, finished_at=timezone.now(),
            **ToolTestRun.error_fields(message("tests.queue_failed")),
        )
        raise ToolTestRefused(503, _("No worker is available to run tools right now; try again later.")) from exc
    return run


def runs_of(toolkit: Toolkit) -> QuerySet[ToolTestRun]:
    return ToolTestRun.objects.filter(toolkit=toolkit).select_related("revision", "started_by", "overridden_by")


def failed_gate_runs(revision_ids: list[int]) -> dict[int, ToolTestRun]:
    """Of these revisions, those whose last gate run failed: that run, with its cases (two
    queries however many revisions; the review page)."""
    latest: dict[int, ToolTestRun] = {}
    runs = ToolTestRun.objects.filter(revision_id__in=revision_ids, gate=True).order_by("revision_id", "-created_at", "-id")
    for run in runs.prefetch_related("results"):
        latest.setdefault(run.revision_id, run)
    return {pk: run for pk, run in latest.items() if run.status == ToolTestStatus.FAILED}


def revision_tests(revision_ids: list[int]) -> dict[int, dict]:
    """Each revision's tests as its detail shows them, in one query: its last gate run's status
    ("none" without one; queued counts as running) and id."""
    found: dict[int, dict] = {pk: {"status": "none", "run": None} for pk in revision_ids}
    runs = ToolTestRun.objects.filter(revision_id__in=revision_ids, gate=True).order_by("revision_id", "-created_at", "-id")
    seen: set[int] = set()
    for pk, revision_id, status in runs.values_list("pk", "revision_id", "status"):
        if revision_id not in seen:
            seen.add(revision_id)
            found[revision_id] = {"status": "running" if status == ToolTestStatus.QUEUED else status, "run": pk}
    return found
