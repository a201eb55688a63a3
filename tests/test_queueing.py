"""Queueing that cannot strand work: a broker that is down when an
upload (or an approval, or a retry) commits answers 503, and the revision is failed with the
reason, so Retry works at once instead of "Queued for build" for 17 minutes and "There is
nothing to retry."; queued work whose message is gone is sent again by the reaper before it is
ever failed (with a real worker: tests/test_invocations.py and tests/test_faults.py)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from tests.conftest import toolkit_source
from tests.test_api_invocations import broker_unreachable
from toolhub import heartbeat
from toolhub.accounts.models import ApiToken
from toolhub.reaper import reap_stale_work
from toolhub.runs.models import Invocation, RunStatus
from toolhub.toolkits import lifecycle
from toolhub.toolkits.models import Revision, Status, Toolkit
from toolhub.toolkits.tasks import build_revision

pytestmark = pytest.mark.django_db(transaction=True)


def _bearer(user) -> dict:
    _token, raw = ApiToken.issue(user=user, name="tests")
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def test_an_upload_while_the_broker_is_down_answers_503_and_can_be_retried_at_once(client, alice):
    headers = _bearer(alice)
    started = time.monotonic()
    with broker_unreachable():
        response = client.post(
            "/api/v1/toolkits", json.dumps({"source": toolkit_source("Queued")}), content_type="application/json", **headers
        )
    assert time.monotonic() - started < 10
    assert response.status_code == 503, response.content
    assert response.json()["errors"][0]["message"] == lifecycle.QUEUE_FAILED.english()
    revision = Revision.objects.get()
    # Committed (nothing lost), and failed with the reason (nothing stuck).
    assert (revision.status, revision.status_detail) == (Status.FAILED, lifecycle.QUEUE_FAILED.english())
    # The broker is back: Retry queues the build at once.
    assert lifecycle.retry(revision_id=revision.pk) is not None
    revision.refresh_from_db()
    assert revision.status == Status.BUILDING


def test_the_page_answers_503_too_and_its_retry_button_works(client, alice):
    client.force_login(alice)
    with broker_unreachable():
        response = client.post("/toolkits/new/", {"source": toolkit_source("Queued page"), "slug": "queued_page"})
    assert response.status_code == 503
    assert "Retry" in response.content.decode()
    toolkit = Toolkit.objects.get(slug="queued_page")
    assert toolkit.latest_revision().status == Status.FAILED
    response = client.post(f"/toolkits/{toolkit.slug}/environment/retry/", follow=True)
    assert response.status_code == 200
    assert toolkit.latest_revision().status == Status.BUILDING


# QUEUED WORK WHOSE MESSAGE IS GONE
# ------------------------------------------------------------------------------------------


def _age_last_send(**filters) -> None:
    """As if the last send was longer ago than the grace period (one UPDATE, no sleeping)."""
    long_ago = timezone.now() - timedelta(seconds=settings.TOOLHUB_RESEND_AFTER_SECONDS + 1)
    Invocation.objects.filter(**filters).update(sent_at=long_ago)


def test_a_queued_invocation_is_sent_again_before_it_is_ever_failed(alice, upload):
    toolkit = upload(alice, toolkit_source("Never Taken"))
    invocation = Invocation.objects.create(toolkit=toolkit, revision=toolkit.latest_revision(), tool="echo", user=alice)
    fresh = Invocation.objects.create(toolkit=toolkit, revision=toolkit.latest_revision(), tool="echo", user=alice)

    # Each pass of the reaper after the grace period sends the task again, and fails nothing...
    for sends in range(2, settings.TOOLHUB_RESEND_MAX + 2):
        _age_last_send(pk=invocation.pk)
        assert reap_stale_work.run() == {
            "invocations": 0, "builds": 0, "test_runs": 0, "agent_runs": 0,
            "resent": {"invocations": 1, "builds": 0, "agent_runs": 0},
        }
        invocation.refresh_from_db()
        assert (invocation.status, invocation.sends) == (RunStatus.QUEUED, sends)
        assert timezone.now() - invocation.sent_at < timedelta(seconds=5)
    # ...until it was sent 1 + TOOLHUB_RESEND_MAX times and still no worker took it.
    _age_last_send(pk=invocation.pk)
    assert reap_stale_work.run()["invocations"] == 1
    invocation.refresh_from_db()
    assert invocation.status == RunStatus.FAILED and invocation.finished_at is not None
    assert invocation.error == (
        f"No worker took this invocation although its task was sent {settings.TOOLHUB_RESEND_MAX + 1} times"
        " (is a worker serving the sandbox queue?)."
    )
    # One sent a moment ago is left alone.
    fresh.refresh_from_db()
    assert (fresh.status, fresh.sends) == (RunStatus.QUEUED, 1)


def test_a_queued_build_is_sent_again_then_failed_with_the_reason_and_retry_works_at_once(alice, upload):
    revision = upload(alice, toolkit_source("Never Built")).latest_revision()
    assert (revision.status, revision.task_name, revision.task_sends) == (Status.BUILDING, lifecycle.BUILD_TASK, 1)
    long_ago = timezone.now() - timedelta(seconds=settings.TOOLHUB_RESEND_AFTER_SECONDS + 1)
    for sends in range(2, settings.TOOLHUB_RESEND_MAX + 2):
        Revision.objects.filter(pk=revision.pk).update(task_sent_at=long_ago)
        assert reap_stale_work.run() == {
            "invocations": 0, "builds": 0, "test_runs": 0, "agent_runs": 0,
            "resent": {"invocations": 0, "builds": 1, "agent_runs": 0},
        }
        revision.refresh_from_db()
        assert (revision.status, revision.task_sends) == (Status.BUILDING, sends)
    Revision.objects.filter(pk=revision.pk).update(task_sent_at=long_ago)
    assert reap_stale_work.run()["builds"] == 1
    revision.refresh_from_db()
    assert revision.status == Status.FAILED
    assert revision.status_detail == (
        f"No worker took the build although its task was sent {settings.TOOLHUB_RESEND_MAX + 1} times"
        " (is a worker serving the builds queue?); press Retry to build again."
    )
    assert lifecycle.retry(revision_id=revision.pk) is not None
    revision.refresh_from_db()
    assert (revision.status, revision.task_sends, revision.heartbeat_at) == (Status.BUILDING, 1, None)


def test_a_second_delivery_of_a_build_is_ignored_while_the_first_runs(alice, upload):
    revision = upload(alice, toolkit_source("Built Once")).latest_revision()
    assert lifecycle.build_claim(revision_id=revision.pk)  # the first delivery runs it
    assert not lifecycle.build_claim(revision_id=revision.pk)
    build_revision.run(revision.pk)  # the second delivery
    revision.refresh_from_db()
    assert (revision.status, revision.status_detail, revision.build_log) == (Status.BUILDING, "Locking the requirements", "")


def test_a_build_whose_worker_stopped_beating_is_failed_and_a_beating_one_is_left_alone(alice, upload, monkeypatch):
    monkeypatch.setattr(heartbeat, "EVERY_SECONDS", 0.1)
    dead = upload(alice, toolkit_source("Dead Build")).latest_revision()
    alive = upload(alice, toolkit_source("Live Build")).latest_revision()
    assert lifecycle.build_claim(revision_id=dead.pk) and lifecycle.build_claim(revision_id=alive.pk)
    silent = timezone.now() - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS + 1)
    Revision.objects.filter(pk__in=[dead.pk, alive.pk]).update(heartbeat_at=silent)
    with lifecycle.step_heartbeat(alive.pk):
        deadline = time.monotonic() + 10
        while Revision.objects.get(pk=alive.pk).heartbeat_at == silent and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reap_stale_work.run()["builds"] == 1
    dead.refresh_from_db()
    assert (dead.status, dead.status_detail) == (Status.FAILED, lifecycle.INTERRUPTED.english())
    assert Revision.objects.get(pk=alive.pk).status == Status.BUILDING
    # Retry works at once.
    assert lifecycle.retry(revision_id=dead.pk) is not None
    assert Revision.objects.get(pk=dead.pk).status == Status.BUILDING
