"""Celery tasks of a revision's lifecycle. Thin: each takes an id and calls the step in
toolhub.toolkits.building. Routed per task name (settings.CELERY_TASK_ROUTES)."""

from __future__ import annotations

from celery import shared_task

from toolhub.toolkits import building, lifecycle


@shared_task(name=lifecycle.BUILD_TASK, acks_late=True)
def build_revision(revision_id: int) -> None:
    building.build(revision_id)


@shared_task(name=lifecycle.INTROSPECT_TASK, acks_late=True)
def introspect_revision(revision_id: int) -> None:
    building.introspect(revision_id)
