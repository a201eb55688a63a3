"""Queueing that cannot strand work (issue 18, finding 3): a broker that is down when an
upload (or an approval, or a retry) commits answers 503, and the revision is failed with the
reason, so Retry works at once instead of "Queued for build" for 17 minutes and "There is
nothing to retry."."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import toolkit_source
from tests.test_api_invocations import broker_unreachable
from toolhub.accounts.models import ApiToken
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
