"""The agent runs' Celery tasks: they take an id and hand it on."""

from __future__ import annotations

from celery import shared_task

from toolhub.agents import engine, services, upkeep


@shared_task(name=services.RUN_TASK, acks_late=True)
def run_agent(run_id: str) -> None:
    engine.take(run_id)


@shared_task
def reap_stale_agent_runs() -> int:
    """Ends agent runs whose worker died, sends the task of runs still queued
    TOOLHUB_RESEND_AFTER_SECONDS after their last send again (the broker may have lost it, as
    for invocations), and fails those that no worker took after 1 + TOOLHUB_RESEND_MAX sends,
    saying why (toolhub.agents.upkeep). Returns how many runs it ended."""
    return upkeep.reap()
