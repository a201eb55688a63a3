"""The worker's side of tool tests (docs/tool-tests.md): a test run calls each saved test of its
toolkit against its revision, one after the other, each an invocation of its own with the
surface `test` run by this worker through the invocation engine (so the sandbox's limits,
events and the history apply, and a hanging test ends at the sandbox's wall-clock limit), then
checks what came back (toolhub.toolkits.tool_checks).

A gate run is a step of the revision's lifecycle (toolhub.toolkits.lifecycle, "Tool tests"):
claimed, beaten and reaped like the build's steps, and it ends with lifecycle.tests_done. A run
asked for on demand is claimed from its own row and beats on it; reap_test_runs ends either kind
when its worker stopped."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from toolhub import dbretry, heartbeat
from toolhub.heartbeat import Beat
from toolhub.messages import Message, message
from toolhub.runs import engine
from toolhub.runs.models import Invocation, RunStatus, Surface
from toolhub.toolkits import lifecycle, tool_checks
from toolhub.toolkits.models import ToolTest, ToolTestResult, ToolTestRun, ToolTestStatus
from toolhub.toolkits.tool_tests import MAX_TESTS

logger = logging.getLogger(__name__)

# A run asked for on demand that no worker took for this long is ended (the reaper).
QUEUED_AT_MOST = timedelta(minutes=15)
WORKER_STOPPED = message("tests.worker_stopped")
NOT_TAKEN = message("tests.not_taken")


def run_gate(revision_id: int) -> None:
    """The lifecycle's step: run the revision's queued gate run, then let the lifecycle decide."""
    if not lifecycle.tests_claim(revision_id=revision_id):
        return
    with lifecycle.step_heartbeat(revision_id):
        run = ToolTestRun.objects.filter(revision_id=revision_id, gate=True, status=ToolTestStatus.QUEUED).order_by("-id").first()
        if run is None or not _claim(run.pk):
            lifecycle.fail(revision_id=revision_id, reason=WORKER_STOPPED)
            return
        run.refresh_from_db()
        _execute(run, on_case=lambda: lifecycle.tests_progress(revision_id=revision_id))
    run.refresh_from_db()
    if run.status not in (ToolTestStatus.PASSED, ToolTestStatus.FAILED):
        lifecycle.fail(revision_id=revision_id, reason=Message.from_json(run.error_message) or WORKER_STOPPED)
        return
    failed = list(run.results.filter(passed=False).values_list("name", flat=True))
    lifecycle.tests_done(revision_id=revision_id, failed=failed, total=run.total)


def run_on_demand(run_id: int) -> None:
    """A run asked for with "Run tests" (or the API): only its results; the revision's state
    does not change."""
    if not _claim(run_id):
        return
    _execute(ToolTestRun.objects.get(pk=run_id))


def _claim(run_id: int) -> bool:
    now = timezone.now()
    return bool(ToolTestRun.objects.filter(pk=run_id, status=ToolTestStatus.QUEUED).update(
        status=ToolTestStatus.RUNNING, started_at=now, heartbeat_at=now
    ))


def _execute(run: ToolTestRun, *, on_case=None) -> None:
    """Run every test of the toolkit (as saved now) against the run's revision, in name order."""

    def beat() -> None:
        dbretry.write(
            lambda: ToolTestRun.objects.filter(pk=run.pk, status=ToolTestStatus.RUNNING).update(heartbeat_at=timezone.now()),
            what=f"the heartbeat of test run {run.pk}",
        )

    tests = list(ToolTest.objects.filter(toolkit_id=run.toolkit_id)[:MAX_TESTS])
    ToolTestRun.objects.filter(pk=run.pk).update(total=len(tests))
    failed = 0
    try:
        with Beat(beat, every=heartbeat.EVERY_SECONDS):
            for position, test in enumerate(tests):
                result = _case(run, test, position)
                result.save()
                failed += not result.passed
                if on_case is not None:
                    on_case()
    except Exception as exc:  # noqa: BLE001 - a run must always end
        logger.exception("test run %s crashed in the worker", run.pk)
        ToolTestRun.objects.filter(pk=run.pk, status=ToolTestStatus.RUNNING).update(
            status=ToolTestStatus.FAILED, failed=failed, finished_at=timezone.now(),
            **ToolTestRun.error_fields(message("tests.internal_error", error=type(exc).__name__)),
        )
        return
    ToolTestRun.objects.filter(pk=run.pk, status=ToolTestStatus.RUNNING).update(
        status=ToolTestStatus.FAILED if failed else ToolTestStatus.PASSED, failed=failed, finished_at=timezone.now()
    )


def _case(run: ToolTestRun, test: ToolTest, position: int) -> ToolTestResult:
    """Call the test's tool in the sandbox and check what came back."""
    result = ToolTestResult(run=run, test=test, position=position, name=test.name, tool=test.tool)
    revision = run.revision
    # Arguments that no longer fit the tool's parameters are refused by the runtime (argcheck),
    # and the case fails with its error.
    if test.tool not in {(spec.get("function") or {}).get("name") for spec in revision.tools or []}:
        result.set_message(message("tests.no_tool", tool=repr(test.tool)))
        return result
    invocation = Invocation(
        toolkit_id=run.toolkit_id, revision=revision, tool=test.tool, arguments=test.arguments,
        user_id=run.started_by_id, surface=Surface.TEST,
    )
    invocation.save(force_insert=True)
    result.invocation = invocation
    # Stored before the call: the engine finds the test's own UserValves through it
    # (toolkits.tool_tests.saved_user_valves).
    result.set_message(message("tests.unfinished"))
    result.save()
    # This worker runs it (the fair queue leaves `test` invocations alone): sandbox limits,
    # heartbeats, events and the history as for any call.
    engine.run(str(invocation.id))
    invocation.refresh_from_db(fields=["status", "result", "error", "error_message"])
    outcome = tool_checks.evaluate(
        test.checks, succeeded=invocation.status == RunStatus.SUCCEEDED, result=invocation.result,
        error=invocation.error, error_message=Message.from_json(invocation.error_message),
    )
    result.passed, result.expected, result.actual = outcome.passed, outcome.expected, outcome.actual
    result.set_message(outcome.message)
    return result


def reap_test_runs() -> int:
    """End runs whose worker stopped beating, and runs asked for on demand that no worker took;
    returns how many. (A gate run's revision is reaped by lifecycle.reap_stale_builds.)"""
    now = timezone.now()
    stopped = ToolTestRun.objects.filter(
        status=ToolTestStatus.RUNNING, heartbeat_at__lt=now - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS)
    ).update(status=ToolTestStatus.FAILED, finished_at=now, **ToolTestRun.error_fields(WORKER_STOPPED))
    untaken = ToolTestRun.objects.filter(
        Q(gate=False) | Q(revision__status__in=["failed", "rejected"]),
        status=ToolTestStatus.QUEUED, created_at__lt=now - QUEUED_AT_MOST,
    ).update(status=ToolTestStatus.FAILED, finished_at=now, **ToolTestRun.error_fields(NOT_TAKEN))
    return stopped + untaken
