"""Celery tasks of package approvals. Thin: the index lookup of one name (on the default
`celery` queue, so it never waits behind a build)."""

from __future__ import annotations

from celery import shared_task

from toolhub.packages import index_checks


@shared_task(name=index_checks.CHECK_TASK, ignore_result=True)
def check_package_index(name: str) -> None:
    index_checks.check(name=name)
