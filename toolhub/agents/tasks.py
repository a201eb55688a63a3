"""The agent runs' Celery tasks: they take an id and hand it on."""

from __future__ import annotations

from celery import shared_task

from toolhub.agents import engine, services


@shared_task(name=services.RUN_TASK, acks_late=True)
def run_agent(run_id: str) -> None:
    engine.take(run_id)
