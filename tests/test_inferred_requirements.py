"""Requirements inferred from imports the toolkit does not declare: found statically at
upload (the maintained import → distribution table), shown on the Overview, waiting in the
same admin queue (marked inferred, with toolkit and line), built once approved and run in
the sandbox; optional imports ask for nothing.

People (see conftest): admin approves, alice uploads.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.sandbox_fixtures import require_sandbox
from toolhub.packages.import_names import distribution_for, needs_distribution
from toolhub.packages.models import PackageRequest
from toolhub.runs.models import RunStatus
from toolhub.runs.services import invocation_create
from toolhub.runs.tasks import run_invocation
from toolhub.toolkits.models import Status
from toolhub.toolkits.source_checks import InferredRequirement, parse_toolkit_source

UNDECLARED = '''"""
title: Page Size
description: Says which HTTP client it has.
"""
import json
import os
from typing import TYPE_CHECKING

import requests
from pydantic import BaseModel

try:
    from bs4 import BeautifulSoup
except ImportError:
    BeautifulSoup = None

if TYPE_CHECKING:
    from fastapi import Request


class Tools:
    class Valves(BaseModel):
        pass

    def client(self) -> str:
        """Which HTTP client the toolkit has."""
        return json.dumps({"requests": requests.__version__, "bs4": BeautifulSoup is not None, "os": os.name})
'''


def test_the_table_maps_import_names_to_distributions():
    assert distribution_for("bs4") == "beautifulsoup4"
    assert distribution_for("yaml") == "pyyaml"
    assert distribution_for("PIL") == "pillow"
    assert distribution_for("dotenv") == "python-dotenv"
    assert distribution_for("cv2") == "opencv-python-headless"
    assert distribution_for("sklearn") == "scikit-learn"
    assert distribution_for("dateutil") == "python-dateutil"
    assert distribution_for("googleapiclient") == "google-api-python-client"
    assert distribution_for("requests") == "requests"
    assert not any(map(needs_distribution, ["os", "json", "asyncio", "pydantic", "typing_extensions", "open_webui"]))
    assert needs_distribution("agent") and not needs_distribution("agent", kind="ragflow")


def test_undeclared_imports_are_inferred_with_their_line_and_optional_ones_are_not():
    parsed = parse_toolkit_source(UNDECLARED)
    assert parsed.inferred_requirements == [InferredRequirement("requests", "requests", 9)]
    # A declared requirement covers its import, whatever the spelling of its name.
    declared = UNDECLARED.replace("description:", "requirements: Requests>=2" + chr(10) + "description:")
    assert parse_toolkit_source(declared).inferred_requirements == []
    # bs4 is required once the import is no longer optional.
    required = UNDECLARED.replace("try:\n    from bs4", "from bs4").replace(
        "except ImportError:\n    BeautifulSoup = None\n", ""
    )
    assert [r.name for r in parse_toolkit_source(required).inferred_requirements] == ["requests", "beautifulsoup4"]


@pytest.mark.django_db
def test_an_inferred_requirement_waits_in_the_queue_marked_with_toolkit_and_line(client, admin, alice, upload):
    toolkit = upload(alice, UNDECLARED)
    revision = toolkit.current_revision
    assert revision.status == Status.AWAITING_APPROVAL
    assert revision.status_detail == "Waiting for an admin to approve: requests"
    assert revision.requirements == [
        {"name": "requests", "specifier": "", "text": "requests", "inferred": {"module": "requests", "line": 9}}
    ]
    request = PackageRequest.objects.get(revision=revision)
    assert (request.package.name, request.import_name, request.import_line) == ("requests", "requests", 9)

    client.force_login(alice)
    overview = client.get(reverse("toolkit_detail", args=[toolkit.slug])).content.decode()
    assert "<code>requests</code> <span class=\"muted inferred\">inferred from <code>import requests</code> (line 9)</span>" in overview

    client.force_login(admin)
    queue = client.get("/packages/").content.decode()
    assert f'href="{reverse("toolkit_environment", args=[toolkit.slug])}">page_size</a> #1' in queue
    assert '<span class="tag inferred">inferred from import requests (line 9)</span>' in queue
    french = client.get("/packages/", headers={"accept-language": "fr"}).content.decode()
    assert "déduit de import requests (ligne 9)" in french


@pytest.mark.slow
@pytest.mark.django_db
def test_once_approved_the_inferred_package_is_built_and_the_tool_runs_in_the_sandbox(admin, alice, upload, build):
    from toolhub.toolkits.lifecycle import package_approve

    require_sandbox()
    toolkit = upload(alice, UNDECLARED)
    package_approve(name="requests", user=admin)
    toolkit = build(toolkit)
    revision = toolkit.current_revision
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-2000:])
    assert "requests==" in revision.lock and "beautifulsoup4" not in revision.lock
    invocation = invocation_create(toolkit=toolkit, tool="client", arguments={}, user=alice)
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    assert invocation.status == RunStatus.SUCCEEDED, invocation.error
    assert '"bs4": false' in invocation.result and '"requests": "2.' in invocation.result


# What real Open WebUI toolkits do: requests, bs4 and fastapi (for `__request__`'s type), none
# declared (all three come from the offline test wheelhouse).
SCRAPER = '''"""
title: Page Title
"""
import requests
from bs4 import BeautifulSoup
from fastapi import Request


class Tools:
    def title(self, html: str, __request__: Request = None) -> str:
        """The title of an HTML page."""
        soup = BeautifulSoup(html, "html.parser")
        return f"{soup.title.string} ({Request.__name__}, requests {requests.__version__.split('.')[0]})"
'''


@pytest.mark.slow
@pytest.mark.django_db
def test_requests_bs4_and_fastapi_are_inferred_approved_built_and_run(client, admin, alice, upload, build):
    from toolhub.toolkits.lifecycle import packages_approve

    require_sandbox()
    toolkit = upload(alice, SCRAPER)
    revision = toolkit.current_revision
    assert revision.status == Status.AWAITING_APPROVAL
    assert revision.status_detail == "Waiting for an admin to approve: beautifulsoup4, fastapi, requests"
    assert [(r["name"], r["inferred"]["module"], r["inferred"]["line"]) for r in revision.requirements] == [
        ("requests", "requests", 4), ("beautifulsoup4", "bs4", 5), ("fastapi", "fastapi", 6),
    ]
    client.force_login(admin)
    queue = client.get("/packages/").content.decode()
    for module, line in (("requests", 4), ("bs4", 5), ("fastapi", 6)):
        assert f"inferred from import {module} (line {line})" in queue

    packages_approve(names=["beautifulsoup4", "fastapi", "requests"], user=admin)
    toolkit = build(toolkit)
    revision = toolkit.current_revision
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-2000:])
    assert [tool["function"]["name"] for tool in revision.tools] == ["title"]
    invocation = invocation_create(toolkit=toolkit, tool="title", arguments={"html": "<title>Hi</title>"}, user=alice)
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "Hi (Request, requests 2)"), invocation.error
