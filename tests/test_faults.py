"""The fault suite: real processes are killed and real database connections are
terminated while work is in flight, and nothing may be lost or stuck.

- PostgreSQL backends terminated mid-run (`pg_terminate_backend`, as a failover or an idle
  timeout would): the worker's task connection, its heartbeat thread's connection and the web
  request's connection all die while the tool runs. The tool's result and events must still
  be stored, the heartbeat must go on, and the `wait: true` caller gets its 200, not a 500.
  (A worker SIGKILLed mid-run is in tests/test_invocations.py, one SIGKILLed mid-build in
  tests/test_builds.py.)
- A private `redis-server` without persistence stopped and started again while invocations
  run and wait in the queue, and a build waits too: every message in it is lost. The running
  ones finish, the reaper sends the lost ones again, and each runs exactly once.
- The reaper is never late: with a backlog on the sandbox queue, a dead worker's invocation is
  reaped within seconds by the worker that serves the `maintenance` queue (celery beat in it).

Marked `fault` (and `worker`, `sandbox`); `.ci/run` runs them with the rest of the suite.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from tests.conftest import example, start_worker
from tests.helpers import broker_at
from tests.live_fixtures import start_redis
from tests.sandbox_fixtures import require_sandbox
from toolhub import heartbeat
from toolhub.accounts.models import ApiToken
from toolhub.reaper import reap_stale_work
from toolhub.runs.models import FINISHED, Event, Invocation, RunStatus
from toolhub.runs.services import invocation_create
from toolhub.toolkits.models import Revision, Status

pytestmark = [pytest.mark.fault]

SLOW = '''"""
title: Slow Steps
author: ToolHub tests
description: Reports, sleeps, reports again.
version: 1.0.0
"""

import time


class Tools:
    def steps(self, seconds: float = 4.0, __event_emitter__=None) -> str:
        """Report a status, sleep, report again, return."""
        __event_emitter__({"type": "status", "data": {"description": "first", "done": False}})
        time.sleep(seconds)
        __event_emitter__({"type": "status", "data": {"description": "second", "done": True}})
        return "all steps done"
'''


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("terminating backends needs PostgreSQL (CI sets DATABASE_URL)")
    require_sandbox()


def _terminate_backends() -> int:
    """Terminate every other connection to the test database, from a connection of its own."""
    s = connection.settings_dict
    with psycopg.connect(
        dbname=s["NAME"], user=s["USER"] or None, password=s["PASSWORD"] or None,
        host=s["HOST"] or None, port=s["PORT"] or None, autocommit=True,
    ) as killer:
        rows = killer.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def _wait_until(predicate, *, timeout: float = 60.0, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.worker
@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_terminated_database_connections_lose_no_result_and_no_caller(postgres, upload, build, alice, client, tmp_path):
    toolkit = build(upload(alice, SLOW))
    assert toolkit.current_revision.status == Status.READY, toolkit.current_revision.status_detail
    _token, raw = ApiToken.issue(user=alice, name="tests")
    worker = start_worker(tmp_path)
    terminated: list[int] = []
    killed_at: list = []
    beats: list = []

    def chaos() -> None:
        # Once the tool has started (its first event is stored), kill every connection twice
        # while it sleeps: the worker's, its heartbeat thread's and this request's own.
        from django.db import connections

        try:
            _wait_until(lambda: Event.objects.filter(invocation__tool="steps").exists(), what="the tool to start")
            time.sleep(0.5)
            killed_at.append(timezone.now())
            terminated.append(_terminate_backends())
            time.sleep(2.5)
            connections.close_all()  # this thread's connection was terminated too
            # The heartbeat thread beat again on a new connection (it beats every 2 s).
            beats.append(Invocation.objects.values_list("heartbeat_at", flat=True).get())
            terminated.append(_terminate_backends())
        finally:
            connections.close_all()

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        response = client.post(
            f"/api/v1/toolkits/{toolkit.slug}/tools/steps/invoke",
            json.dumps({"arguments": {"seconds": 6}, "wait": True}),
            content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}",
        )
        thread.join(30)
    finally:
        worker.kill()
    log = worker.output()

    assert len(terminated) == 2 and all(terminated), terminated
    # The caller got the finished invocation, not a 500 it would retry (running the tool twice).
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "succeeded", (body, log[-3000:])
    assert body["result"] == "all steps done"
    assert [e["data"]["description"] for e in body["events"] if e["type"] == "status"] == ["first", "second"]
    invocation = Invocation.objects.get(pk=body["id"])
    assert invocation.status == RunStatus.SUCCEEDED and invocation.error == ""
    # The heartbeat thread's connection died too, and it beat again on a new one.
    assert beats and beats[0] is not None and beats[0] > killed_at[0]
    assert invocation.heartbeat_at >= beats[0]
    assert "reconnecting once" in log
    assert time.monotonic() - started < 60


@pytest.mark.django_db(transaction=True)
def test_a_database_that_refuses_connections_gets_503_not_500(client, alice):
    """Found by bench/load.py: with PostgreSQL out of connection slots ("too many clients"),
    invoke answered 500, which a caller cannot tell from a bug. Here the database really
    refuses: the connection goes to a port where nothing listens."""
    from django.db import connections

    _token, raw = ApiToken.issue(user=alice, name="tests")
    settings_dict = connections["default"].settings_dict
    saved = dict(settings_dict)
    connections["default"].close()
    settings_dict.update(HOST="127.0.0.1", PORT="1")
    if connection.vendor == "sqlite":
        settings_dict.update(NAME="/nonexistent/dir/db.sqlite3")
    try:
        response = client.get("/api/v1/toolkits", HTTP_AUTHORIZATION=f"Bearer {raw}")
    finally:
        connections["default"].close()
        settings_dict.clear()
        settings_dict.update(saved)
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "1"
    assert response.json()["errors"][0]["message"] == "The database is unavailable right now; try again in a moment."


@pytest.mark.worker
@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_a_redis_restart_without_persistence_loses_no_invocation_and_no_build(
    postgres, upload, build, alice, tmp_path, settings
):
    toolkit = build(upload(alice, SLOW))
    assert toolkit.current_revision.status == Status.READY, toolkit.current_revision.status_detail
    redis = start_redis(tmp_path)
    url = f"redis://127.0.0.1:{redis.port}/0"
    settings.TOOLHUB_RESEND_AFTER_SECONDS = 3
    settings.TOOLHUB_USER_MAX_ACTIVE = 0
    worker = None
    try:
        with broker_at(url):
            worker = start_worker(tmp_path, concurrency=2, env={"REDIS_URL": url})
            # Two run (the worker's two processes), four wait in Redis, and so does a build.
            invocations = [
                invocation_create(toolkit=toolkit, tool="steps", arguments={"seconds": 3}, user=alice) for _ in range(6)
            ]
            _wait_until(lambda: Invocation.objects.filter(status=RunStatus.RUNNING).count() == 2, what="two to run")
            pending = upload(alice, example("string_reverse"), slug="built_after_restart").latest_revision()
            queued = Invocation.objects.filter(status=RunStatus.QUEUED).count()
            assert queued == 4

            redis.stop(signal.SIGKILL)
            time.sleep(1)
            redis = start_redis(tmp_path, port=redis.port)  # empty: no persistence
            restarted = time.monotonic()

            resent = {"invocations": 0, "builds": 0, "agent_runs": 0}

            def all_done() -> bool:
                # What celery beat does every TOOLHUB_REAP_EVERY_SECONDS.
                for kind, n in reap_stale_work.run()["resent"].items():
                    resent[kind] += n
                revision = Revision.objects.get(pk=pending.pk)
                return revision.status != Status.BUILDING and not Invocation.objects.exclude(status__in=list(FINISHED)).exists()

            _wait_until(all_done, timeout=90, what="every invocation and the build to end")
            took = time.monotonic() - restarted
    finally:
        if worker is not None:
            worker.kill()
        redis.stop()
    log = worker.output()

    for invocation in Invocation.objects.filter(pk__in=[i.pk for i in invocations]):
        assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "all steps done"), (invocation.error, log[-3000:])
        # Each ran exactly once, although the reaper may have sent some twice.
        assert [e.data["description"] for e in invocation.events.filter(type="status")] == ["first", "second"]
    # The four lost ones were sent again (and perhaps a running one too: a duplicate is ignored).
    assert Invocation.objects.filter(pk__in=[i.pk for i in invocations], sends__gt=1).count() >= queued
    assert resent["invocations"] >= queued and resent["builds"] >= 1, resent
    revision = Revision.objects.get(pk=pending.pk)
    assert revision.status == Status.READY, (revision.status_detail, log[-3000:])
    assert took < 60


@pytest.mark.worker
@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_the_reaper_is_not_late_behind_a_backlog(postgres, upload, build, alice, tmp_path, settings):
    toolkit = build(upload(alice, SLOW))
    settings.TOOLHUB_USER_MAX_ACTIVE = 0
    settings.TOOLHUB_USER_INVOCATIONS_PER_MINUTE = 0
    # One worker for the work (busy for a minute with the backlog) and one for the maintenance
    # queue with celery beat, as `make run` and the README's deployment have them.
    work = start_worker(tmp_path, queues=("sandbox",), name="work")
    maintenance = None
    try:
        maintenance = start_worker(
            tmp_path, queues=("maintenance",), beat=True, name="maintenance", purge=False,
            env={"TOOLHUB_REAP_EVERY_SECONDS": "1"},
        )
        backlog = [
            invocation_create(toolkit=toolkit, tool="steps", arguments={"seconds": 4}, user=alice) for _ in range(15)
        ]
        _wait_until(lambda: Invocation.objects.filter(status=RunStatus.RUNNING).exists(), what="the backlog to start")
        # What a worker that was SIGKILLed mid-run leaves behind: running, and silent since.
        silent_since = timezone.now() - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS + 1)
        dead = Invocation.objects.create(
            toolkit=toolkit, revision=toolkit.current_revision, tool="steps", arguments={}, user=alice,
            status=RunStatus.RUNNING, started_at=silent_since, heartbeat_at=silent_since,
        )
        started = time.monotonic()
        _wait_until(lambda: Invocation.objects.get(pk=dead.pk).status == RunStatus.FAILED, timeout=60, what="the reaper")
        took = time.monotonic() - started
        waiting = Invocation.objects.filter(pk__in=[i.pk for i in backlog], status=RunStatus.QUEUED).count()
    finally:
        work.kill()
        if maintenance is not None:
            maintenance.kill()
    dead.refresh_from_db()
    assert dead.error == "The worker running this invocation stopped before it finished."
    # Reaped while most of the backlog still waited (about a minute of work on one process).
    assert waiting >= 10, waiting
    assert took < 10, (took, maintenance.output()[-3000:])
