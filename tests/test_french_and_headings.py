"""Rough edges a first week found: French says "Approuvé" for one decision and writes the
elapsed seconds of a run in its own decimal style ("1,5 s", like "27,5 Mio"); the build log's
heading follows the page's title (no skipped level, axe heading-order)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone, translation

from tests.helpers import ready_string_reverse
from toolhub.runs.models import Invocation, RunStatus

pytestmark = pytest.mark.django_db


def test_one_decision_is_approuve_in_french():
    from toolhub.packages.models import Approval

    with translation.override("fr"):
        assert str(Approval.APPROVED.label) == "Approuvé"


def test_the_elapsed_time_of_a_run_uses_the_languages_decimal_comma(client, upload, alice):
    toolkit = ready_string_reverse(upload, alice, tools=[{"type": "function", "function": {
        "name": "reverse_string", "description": "Reverse.", "parameters": {"type": "object", "properties": {"string": {"type": "string"}}}}}])
    invocation = Invocation.objects.create(
        toolkit=toolkit, revision=toolkit.current_revision, tool="reverse_string", user=alice, arguments={"string": "a"},
        status=RunStatus.RUNNING, started_at=timezone.now() - timedelta(milliseconds=1500),
    )
    client.force_login(alice)
    french = client.get(f"/invocations/{invocation.id}/live/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    english = client.get(f"/invocations/{invocation.id}/live/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    # However long the request took on a busy machine: a decimal comma in French, a point in English.
    assert re.search(r'id="elapsed"[^>]*>\d+,\d s</span>', french)
    assert re.search(r'id="elapsed"[^>]*>\d+\.\d s</span>', english)


def test_the_build_log_heading_follows_the_toolkits_title(client, upload, alice):
    from tests.conftest import toolkit_source

    upload(alice, toolkit_source("Echo"), slug="echo")
    client.force_login(alice)
    html = client.get("/toolkits/echo/environment/").content.decode()
    assert "<h2>Build log</h2>" in html and "<h3>" not in html
