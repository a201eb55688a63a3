"""A worker says at start when it cannot sandbox, instead of at the first invocation."""

import logging
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.conftest import start_worker
from tests.sandbox_fixtures import require_sandbox, wait_for_no_sandbox_processes
from toolhub.runs.models import Invocation, RunStatus
from toolhub.runs.tasks import run_invocation
from toolhub.runs.warming import warm_from_history
from toolhub.toolkits import sandboxing
from toolhub.toolkits.building import revision_environment
from toolhub.toolkits.models import Status
from toolhub.toolkits.sandboxing import startup_check

pytestmark = [pytest.mark.sandbox, pytest.mark.worker]


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


WARMED = "class Tools:\n    def go(self) -> str:\n        return 'x'\n"


@pytest.fixture
def recent_toolkit(upload, build, alice):
    """A built toolkit with three invocations a minute ago, and one an hour and a half ago of
    another environment's revision (absent: only the recent history counts)."""
    require_sandbox()
    toolkit = build(upload(alice, WARMED))
    revision = toolkit.current_revision
    assert revision.status == Status.READY, revision.status_detail
    for _ in range(3):
        Invocation.objects.create(toolkit=toolkit, revision=revision, tool="go", user=alice, status=RunStatus.SUCCEEDED)
    Invocation.objects.filter(toolkit=toolkit).update(created_at=timezone.now() - timedelta(minutes=1))
    return toolkit


@pytest.fixture
def warm_pool_here(settings):
    settings.TOOLHUB_SANDBOX_WARM = 1
    yield
    pool = sandboxing.warm_pool()
    if pool is not None:
        pool.close()
    sandboxing._warm = None
    assert wait_for_no_sandbox_processes() == []


@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_warming_starts_a_sandbox_for_the_environment_recent_invocations_used(recent_toolkit, warm_pool_here):
    assert warm_from_history() == 1
    (sandbox,) = sandboxing.warm_pool().idle()
    assert sandbox.interpreter_env == revision_environment(recent_toolkit.current_revision)
    # Already warm: a second start-up check starts nothing more.
    assert warm_from_history() == 1 and sandboxing.warm_pool().started == 1


@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_warming_leaves_out_old_history(recent_toolkit, warm_pool_here, settings):
    Invocation.objects.update(created_at=timezone.now() - timedelta(seconds=settings.TOOLHUB_SANDBOX_WARM_HISTORY_SECONDS + 60))
    assert warm_from_history() == 0 and sandboxing.warm_pool().idle() == []


@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_a_starting_worker_warms_from_the_recent_history(recent_toolkit, tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLHUB_SANDBOX_WARM", "1")
    worker = start_worker(tmp_path)
    try:
        deadline = time.monotonic() + 60
        while "warmed 1 sandbox(es) from the recent history" not in worker.output():
            assert time.monotonic() < deadline, worker.output()[-3000:]
            time.sleep(0.2)
    finally:
        worker.kill()


@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_a_call_that_finds_no_room_in_the_memory_budget_runs_cold(recent_toolkit, warm_pool_here, settings, alice):
    # Less than any warm sandbox needs: the call must still run, in a cold sandbox.
    settings.TOOLHUB_SANDBOX_WARM_MEMORY_MB = 1
    invocation = Invocation.objects.create(
        toolkit=recent_toolkit, revision=recent_toolkit.current_revision, tool="go", arguments={}, user=alice
    )
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    assert invocation.status == RunStatus.SUCCEEDED and invocation.result == "x", invocation.error
    assert sandboxing.warm_pool().idle() == [] and sandboxing.warm_pool().started == 0


@pytest.mark.sandbox
def test_a_starting_worker_kills_what_the_sandboxes_of_a_dead_worker_left(caplog):
    import contextlib
    import os
    import pwd
    import subprocess

    require_sandbox()
    pool = sandboxing.uid_pool()
    assert pool is not None
    user = pwd.getpwnam(pool.names()[-1])
    # Adopted by the host's init, as a sandbox whose worker and bubblewrap were killed is.
    started = subprocess.run(
        ["/usr/bin/setsid", "-f", "/bin/sh", "-c", "echo $$; exec /usr/bin/sleep 600 </dev/null >/dev/null 2>&1"],
        user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True, text=True, check=True,
    )
    left = int(started.stdout.split()[0])
    try:
        with caplog.at_level(logging.WARNING):
            startup_check()
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{left}") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not os.path.exists(f"/proc/{left}")
        assert "left running by the sandboxes of a worker that died" in caplog.text
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(left, 9)
