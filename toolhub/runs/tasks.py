"""Celery tasks of invocations. Thin: each takes an id and calls the engine. Routed per task
name (settings.CELERY_TASK_ROUTES): invocations on `sandbox`, the reaper on `maintenance`."""

from __future__ import annotations

from celery import shared_task

from toolhub import broker
from toolhub.runs import engine
from toolhub.toolkits import lifecycle


@shared_task(acks_late=True)
def run_invocation(invocation_id: str) -> None:
    """An invocation was queued: run the fairest queued one (usually this one; see
    engine.run_next), so that one user's flood does not hold up another user's run."""
    engine.run_next(invocation_id)


@shared_task
def reap_stale_work() -> dict:
    """Ends work whose worker died: running invocations without a recent heartbeat, and
    builds likewise; sends the tasks of queued work that no worker took again (their message
    may have been lost), and fails such work once it was sent TOOLHUB_RESEND_MAX times more."""
    return {
        "invocations": engine.reap_stale_invocations(),
        "builds": lifecycle.reap_stale_builds(),
        "resent": {
            "invocations": engine.resend_queued_invocations(lambda pk: broker.send(run_invocation.name, pk)),
            "builds": lifecycle.resend_queued_steps(),
        },
    }
