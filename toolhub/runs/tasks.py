"""Celery tasks of invocations. Thin: each takes an id and calls the engine. Routed per task
name (settings.CELERY_TASK_ROUTES): invocations on `sandbox`, the reaper on `maintenance`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from celery import shared_task

from toolhub import broker, dbretry
from toolhub.runs import engine, tool_tests
from toolhub.toolkits import lifecycle
from toolhub.toolkits.tool_tests import RUN_TASK

T = TypeVar("T")


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


@shared_task
def reap_stale_work() -> dict:
    """Ends work whose worker died: running invocations without a recent heartbeat, and
    builds likewise; sends the tasks of queued work that no worker took again (their message
    may have been lost), and fails such work once it was sent TOOLHUB_RESEND_MAX times more.
    Each step is repeated once on a new connection when the database connection drops under it
    (each is a conditional update, safe to repeat)."""

    def step(fn: Callable[[], T], what: str) -> T:
        return cast(T, dbretry.write(fn, what=f"the reaper: {what}", already_done=None))

    return {
        "invocations": step(engine.reap_stale_invocations, "stale invocations"),
        "builds": step(lifecycle.reap_stale_builds, "stale builds"),
        "test_runs": step(tool_tests.reap_test_runs, "stale test runs"),
        "resent": {
            "invocations": step(
                lambda: engine.resend_queued_invocations(lambda pk: broker.send(run_invocation.name, pk)),
                "queued invocations",
            ),
            "builds": step(lifecycle.resend_queued_steps, "queued builds"),
        },
    }
