"""Queueing that cannot strand work (issue 18, findings 3 and 5): a broker that is down when an
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
from toolhub.accounts.models import ApiToken
from toolhub.runs.models import Invocation, RunStatus
from toolhub.runs.tasks import reap_stale_work
from toolhub.toolkits import lifecycle
from toolhub.toolkits.models import Revision, Status, Toolkit

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
    assert response.json()["errors"][0]["message"] == lifecycle.QUEUE_FAILED
    revision = Revision.objects.get()
    # Committed (nothing lost), and failed with the reason (nothing stuck).
    assert (revision.status, revision.status_detail) == (Status.FAILED, lifecycle.QUEUE_FAILED)
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


# QUEUED WORK WHOSE MESSAGE IS GONE (finding 5)
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
        assert reap_stale_work.run() == {"invocations": 0, "builds": 0, "resent": {"invocations": 1}}
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
