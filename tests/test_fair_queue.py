"""A queue that serves users fairly: a plain user queued ~1,500
invocations and another user's invocation failed "No worker picked this invocation up in time"
(now "No worker took this invocation although its task was sent 4 times").
A broker message now only wakes a worker, which runs the fairest queued invocation
(engine.fairest_queued): one of the user with the fewest runs going, then of the user served
longest ago. Shown on the order itself (real database, no worker) and with a real Celery worker
and sandbox while the reaper runs."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import start_worker
from tests.sandbox_fixtures import require_sandbox
from tests.test_api_invocations import made_invocation, toolkit  # noqa: F401 - fixture
from tests.test_invocations import HARNESS, bearer, ready  # noqa: F401 - fixture
from toolhub import heartbeat
from toolhub.reaper import reap_stale_work
from toolhub.runs import engine
from toolhub.runs.models import Invocation, RunStatus, Surface

pytestmark = pytest.mark.django_db(transaction=True)


def _queued(toolkit, user, *, ago: float, **fields) -> Invocation:  # noqa: F811
    return made_invocation(toolkit, user, created_at=timezone.now() - timedelta(seconds=ago), **fields)


def test_a_user_with_nothing_running_goes_before_an_older_flood(toolkit, alice, carol):  # noqa: F811
    made_invocation(toolkit, alice, status=RunStatus.RUNNING, started_at=timezone.now())
    for n in range(5):
        _queued(toolkit, alice, ago=60 - n)
    mine = _queued(toolkit, carol, ago=1)
    assert engine.fairest_queued() == mine.pk


def test_between_idle_users_the_one_served_longest_ago_goes_first(toolkit, alice, bob, carol):  # noqa: F811
    now = timezone.now()
    made_invocation(toolkit, alice, status=RunStatus.SUCCEEDED, started_at=now - timedelta(seconds=1))
    made_invocation(toolkit, bob, status=RunStatus.SUCCEEDED, started_at=now - timedelta(seconds=30))
    _queued(toolkit, alice, ago=50)
    alice_oldest = _queued(toolkit, alice, ago=55)
    bob_first = _queued(toolkit, bob, ago=10)
    _queued(toolkit, bob, ago=5)
    never_served = _queued(toolkit, carol, ago=0)
    assert engine.fairest_queued() == never_served.pk
    Invocation.objects.filter(user=carol).delete()
    assert engine.fairest_queued() == bob_first.pk
    # Served now, bob is the one served last; alice's oldest is next (not her newest).
    Invocation.objects.filter(pk=bob_first.pk).update(status=RunStatus.SUCCEEDED, started_at=timezone.now())
    assert engine.fairest_queued() == alice_oldest.pk


def test_an_agent_run_s_tool_call_is_never_taken_from_the_queue(toolkit, alice):  # noqa: F811
    """The agent's own worker runs it (engine.run); a worker taking it too would fail it."""
    _queued(toolkit, alice, ago=5, surface=Surface.AGENT)
    assert engine.fairest_queued() is None


def test_a_message_whose_invocation_was_run_for_another_runs_nothing(toolkit, alice):  # noqa: F811
    done = made_invocation(toolkit, alice, status=RunStatus.SUCCEEDED, result="cba")
    live = made_invocation(toolkit, alice, status=RunStatus.RUNNING, heartbeat_at=timezone.now())
    engine.run_next(str(done.id))
    engine.run_next(str(live.id))
    assert list(Invocation.objects.order_by("created_at").values_list("status", flat=True)) == [
        RunStatus.SUCCEEDED, RunStatus.RUNNING,
    ]


def test_a_message_delivered_again_after_its_worker_died_fails_its_run(toolkit, alice):  # noqa: F811
    dead = made_invocation(
        toolkit, alice, status=RunStatus.RUNNING,
        heartbeat_at=timezone.now() - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS * 2),
    )
    engine.run_next(str(dead.id))
    dead.refresh_from_db()
    assert (dead.status, dead.error) == (RunStatus.FAILED, engine.WORKER_STOPPED.english())


@pytest.mark.sandbox
@pytest.mark.worker
def test_one_user_s_flood_does_not_hold_up_another_user_s_run(ready, alice, carol, client, tmp_path, settings):  # noqa: F811
    require_sandbox()
    flood = 12
    settings.TOOLHUB_USER_MAX_ACTIVE = flood + 1
    # The reaper runs throughout with a short patience (sent again every 4 s, failed after the
    # third re-send, some 16 s after it was queued): behind a first-come queue carol's run would
    # wait for all of alice's and fail "No worker took this invocation…".
    settings.TOOLHUB_RESEND_AFTER_SECONDS = 4
    kit = ready(alice, HARNESS)
    worker = start_worker(tmp_path)  # one process: one run at a time

    def invoke(user) -> str:
        response = client.post(
            f"/api/v1/toolkits/{kit.slug}/tools/nap/invoke",
            json.dumps({"arguments": {"seconds": 2}, "wait": False}), content_type="application/json", **bearer(user),
        )
        assert response.status_code == 202, response.content
        return response.json()["id"]

    try:
        floods = [invoke(alice) for _ in range(flood)]
        deadline = time.monotonic() + 60
        while not Invocation.objects.filter(user=alice).exclude(status=RunStatus.QUEUED).exists():
            assert time.monotonic() < deadline, worker.output()[-3000:]
            time.sleep(0.05)
        theirs = invoke(carol)
        deadline = time.monotonic() + 180
        while Invocation.objects.exclude(status__in=list(engine.FINISHED)).exists():
            assert time.monotonic() < deadline, worker.output()[-3000:]
            reap_stale_work.run()
            time.sleep(0.25)
    finally:
        worker.kill()

    carols = Invocation.objects.get(pk=theirs)
    alices = list(Invocation.objects.filter(pk__in=floods))
    # Only what was running when carol asked (and at most one claimed at that very moment)
    # went before her; the rest of alice's backlog came after.
    before = [a for a in alices if a.started_at is not None and a.started_at < carols.started_at]
    assert len(before) <= 2, [(a.created_at, a.started_at) for a in alices]
    after = [a for a in alices if a.finished_at > carols.finished_at]
    assert len(after) >= flood - 2
    # Nothing stuck: alice's own backlog ran, or the reaper ended what waited too long.
    assert {a.status for a in alices} <= {RunStatus.SUCCEEDED, RunStatus.FAILED}
    assert all(a.status == RunStatus.SUCCEEDED or a.error.startswith("No worker took this invocation") for a in alices)
