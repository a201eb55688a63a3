"""Fair use per user: a cap on invocations queued or running at once and
a rate limit, whatever the surface, answered with 429 and Retry-After before anything is
stored or queued; another user is not affected."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.helpers import ready_string_reverse, reverse_tool
from toolhub.accounts.models import ApiToken
from toolhub.runs.models import Invocation, RunStatus

pytestmark = pytest.mark.django_db

PARAMETERS = {"type": "object", "properties": {"string": {"type": "string"}}, "required": ["string"]}


@pytest.fixture
def toolkit(upload, alice):
    return ready_string_reverse(upload, alice, tools=[reverse_tool(PARAMETERS)])


def _bearer(user) -> dict:
    _token, raw = ApiToken.issue(user=user, name="tests")
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def _invoke(client, toolkit, headers):
    return client.post(
        f"/api/v1/toolkits/{toolkit.slug}/tools/reverse_string/invoke",
        json.dumps({"arguments": {"string": "abc"}, "wait": False}), content_type="application/json", **headers,
    )


def test_a_user_at_the_active_cap_gets_429_and_another_user_does_not(client, toolkit, carol, bob, settings):
    settings.TOOLHUB_USER_MAX_ACTIVE = 3
    settings.TOOLHUB_USER_INVOCATIONS_PER_MINUTE = 0
    as_carol, as_bob = _bearer(carol), _bearer(bob)
    for _ in range(3):
        assert _invoke(client, toolkit, as_carol).status_code == 202
    refused = _invoke(client, toolkit, as_carol)
    assert refused.status_code == 429
    assert refused["Retry-After"] == "5"
    assert "You already have 3 invocations queued or running" in refused.json()["errors"][0]["message"]
    assert Invocation.objects.filter(user=carol).count() == 3
    assert _invoke(client, toolkit, as_bob).status_code == 202
    # Once one of carol's is finished, she may start another.
    first = Invocation.objects.filter(user=carol).order_by("created_at").first()
    Invocation.objects.filter(pk=first.pk).update(status=RunStatus.SUCCEEDED, finished_at=timezone.now())
    assert _invoke(client, toolkit, as_carol).status_code == 202


def test_the_rate_limit_answers_429_with_when_to_retry(client, toolkit, carol, bob, settings):
    settings.TOOLHUB_USER_MAX_ACTIVE = 0
    settings.TOOLHUB_USER_INVOCATIONS_PER_MINUTE = 4
    as_carol = _bearer(carol)
    for _ in range(4):
        assert _invoke(client, toolkit, as_carol).status_code == 202
    refused = _invoke(client, toolkit, as_carol)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "At most 4 invocations a minute" in refused.json()["errors"][0]["message"]
    assert _invoke(client, toolkit, _bearer(bob)).status_code == 202
    Invocation.objects.filter(user=carol).update(created_at=timezone.now() - timedelta(seconds=61))
    assert _invoke(client, toolkit, as_carol).status_code == 202


def test_the_run_form_says_why_and_creates_nothing(client, toolkit, carol, settings):
    settings.TOOLHUB_USER_MAX_ACTIVE = 1
    Invocation.objects.create(toolkit=toolkit, revision=toolkit.current_revision, tool="reverse_string", user=carol, arguments={})
    client.force_login(carol)
    response = client.post(f"/toolkits/{toolkit.slug}/tools/reverse_string/run/", {"reverse_string__string": "abc"}, follow=True)
    assert "You already have 1 invocation queued or running; wait until it finishes." in response.content.decode()
    assert Invocation.objects.filter(user=carol).count() == 1


def test_the_limit_message_is_translated(client, toolkit, carol, settings):
    settings.TOOLHUB_USER_MAX_ACTIVE = 1
    Invocation.objects.create(toolkit=toolkit, revision=toolkit.current_revision, tool="reverse_string", user=carol, arguments={})
    client.force_login(carol)
    client.cookies["django_language"] = "fr"
    response = client.post(f"/toolkits/{toolkit.slug}/tools/reverse_string/run/", {"reverse_string__string": "abc"}, follow=True)
    assert "You already have" not in response.content.decode()
