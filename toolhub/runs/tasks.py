"""Celery tasks of invocations. Thin: each takes an id and calls the engine. Routed per task
name (settings.CELERY_TASK_ROUTES): invocations and tests on `sandbox` (the reaper is toolhub.reaper)."""

from __future__ import annotations

from celery import shared_task

from toolhub.runs import engine, tool_tests
from toolhub.toolkits import lifecycle
from toolhub.toolkits.tool_tests import RUN_TASK


@shared_task(acks_late=True)
def run_invocation(invocation_id: str) -> None:
    """An invocation was queued: run the fairest queued one (usually this one; see
    engine.run_next), so that one user's flood does not hold up another user's run."""
    engine.run_next(invocation_id)


@shared_task(name=lifecycle.TEST_TASK, acks_late=True)
def revision_tests(revision_id: int) -> None:
    """A new revision's tests, the lifecycle's step before it may become current."""
    tool_tests.run_gate(revision_id)


@shared_task(name=RUN_TASK, acks_late=True)
def tool_tests_run(run_id: int) -> None:
    """A run of a toolkit's tests asked for on demand."""
    tool_tests.run_on_demand(run_id)
