"""A worker says at start when it cannot sandbox, instead of at the first invocation."""

import logging

import pytest
from django.db import connection

from toolhub.toolkits.sandboxing import startup_check


def test_a_worker_without_bubblewrap_says_so_at_start(settings, caplog):
    settings.TOOLHUB_BWRAP = "/nonexistent/bwrap"
    with caplog.at_level(logging.ERROR):
        startup_check()
    assert "cannot run toolkits" in caplog.text
    assert "bubblewrap" in caplog.text


def test_a_worker_without_the_build_user_says_so_at_start(settings, caplog):
    settings.TOOLHUB_BUILD_USER = "toolhub-no-such-builder"
    with caplog.at_level(logging.ERROR):
        startup_check()
    assert "cannot build environments" in caplog.text
    assert "'toolhub-no-such-builder' does not exist" in caplog.text


def test_a_worker_with_a_working_sandbox_says_nothing(caplog):
    with caplog.at_level(logging.ERROR):
        startup_check()
    assert caplog.text == ""


@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_its_database_connection_from_task_to_task():
    # Celery's own Django fix-up, as a worker installs it: it closes the connection around every
    # task unless CELERY_DB_REUSE_MAX says otherwise, and a new PostgreSQL connection costs more
    # than a warm tool call's queries.
    from celery.fixups.django import DjangoWorkerFixup

    from toolhub.celery import app
    from toolhub.runs.tasks import run_invocation

    fixup = DjangoWorkerFixup(app)
    connection.ensure_connection()
    opened = connection.connection
    for _ in range(10):
        fixup.on_task_prerun(sender=run_invocation)
        fixup.on_task_postrun(sender=run_invocation)
    assert connection.connection is opened
