from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from toolhub.agents import engine
from toolhub.agents.models import AgentRun, AgentRunStatus

# A running agent run whose worker has not beaten for this long is dead.
DEAD_AFTER_SECONDS = 20.0


@shared_task(acks_late=True)
def run_agent(run_id: str) -> None:
    now = timezone.now()
    claimed = AgentRun.objects.filter(pk=run_id, status=AgentRunStatus.QUEUED).update(
        status=AgentRunStatus.RUNNING, started_at=now, heartbeat_at=now
    )
    run = AgentRun.objects.select_related("connection", "strategy_revision", "user").filter(pk=run_id).first()
    if run is None or run.is_finished:
        return
    if not claimed:
        # Redelivered after a worker died mid-run: its tools may have had effects already.
        engine._finish(run, AgentRunStatus.FAILED, error="The worker running this agent run stopped before it finished.")
        return
    engine.execute(run)


@shared_task
def reap_stale_agent_runs() -> int:
    now = timezone.now()
    dead = AgentRun.objects.filter(
        status=AgentRunStatus.RUNNING, heartbeat_at__lt=now - timedelta(seconds=DEAD_AFTER_SECONDS)
    ).update(status=AgentRunStatus.FAILED, finished_at=now,
             error="The worker running this agent run stopped before it finished.")
    unclaimed = AgentRun.objects.filter(
        status=AgentRunStatus.QUEUED, created_at__lt=now - timedelta(seconds=settings.TOOLHUB_STALE_AFTER_SECONDS)
    ).update(status=AgentRunStatus.FAILED, finished_at=now, error="No worker picked this agent run up in time.")
    return dead + unclaimed
