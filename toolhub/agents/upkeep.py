"""The agent runs' upkeep, run by the maintenance queue's reaper (toolhub.reaper): runs
whose worker stopped beating are ended, queued runs whose message may be lost are sent again,
and runs no worker took after every re-send are failed with the reason. The rule and timings
are the tool calls' (toolhub.runs.engine)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from toolhub import heartbeat
from toolhub.agents import engine, services
from toolhub.agents.models import AgentRun, AgentRunStatus
from toolhub.messages import as_written
from toolhub.runs import engine as run_engine
from toolhub.runs.models import error_fields

logger = logging.getLogger(__name__)

# At most this many queued runs are sent again per pass.
RESEND_BATCH = 500


def reap_dead() -> int:
    now = timezone.now()
    return AgentRun.objects.filter(
        status=AgentRunStatus.RUNNING, heartbeat_at__lt=now - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS)
    ).update(status=AgentRunStatus.FAILED, finished_at=now, **error_fields(engine.WORKER_STOPPED))


def resend_queued() -> int:
    """The tool calls' re-send rule (runs.engine.resend_queued). A message that was not lost is
    then one too many, which is harmless: a second delivery finds the run no longer queued
    (engine.take's claim) and, if it still runs, leaves it alone."""
    sent = run_engine.resend_queued(
        AgentRun, AgentRunStatus.QUEUED, services.send_run, batch=RESEND_BATCH, what="agent run"
    )
    if sent:
        logger.warning("sent %d queued agent run(s) again (their messages may have been lost)", sent)
    return sent


def fail_unclaimed() -> int:
    now = timezone.now()
    resend_after = timedelta(seconds=settings.TOOLHUB_RESEND_AFTER_SECONDS)
    unclaimed = AgentRun.objects.filter(
        status=AgentRunStatus.QUEUED, sends__gt=settings.TOOLHUB_RESEND_MAX, sent_at__lt=now - resend_after
    )
    if not unclaimed.exists():
        return 0
    # The true reason: workers that were busy all along, or none serving the queue.
    busy = AgentRun.objects.filter(started_at__gte=now - resend_after).exists()
    why = "the workers were busy with other runs" if busy else "is a worker serving the sandbox queue?"
    sends = settings.TOOLHUB_RESEND_MAX + 1
    # Stored as written: no translation of it exists.
    not_taken = as_written(f"No worker took this agent run although its task was sent {sends} times ({why}).")
    return unclaimed.update(status=AgentRunStatus.FAILED, finished_at=now, **error_fields(not_taken))
