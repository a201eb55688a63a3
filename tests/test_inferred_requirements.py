"""Requirements inferred from imports the toolkit does not declare: found statically at
upload (the maintained import → distribution table), shown on the Overview, waiting in the
same admin queue (marked inferred, with toolkit and line), built once approved and run in
the sandbox; optional imports ask for nothing.

People (see conftest): admin approves, alice uploads.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
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


NAMESPACES = '''"""
title: Cloud Notes
requirements: honcho-ai>=1.0
"""
import google.auth
from google.oauth2 import service_account
from google.cloud import storage, bigquery
from google import genai
import azure.identity
from azure.storage.blob import BlobServiceClient
from azure.core.exceptions import ResourceNotFoundError
from llama_index.core import VectorStoreIndex
from llama_index.llms.openai import OpenAI
import ruamel.yaml
import honcho


class Tools:
    def note(self, text: str) -> str:
        """Keep a note."""
        return text
'''


def test_imports_guarded_by_import_error_are_offered_as_optional_and_type_checking_ones_are_not():
    parsed = parse_toolkit_source(UNDECLARED)
    assert parsed.optional_requirements() == [InferredRequirement("beautifulsoup4", "bs4", 13)]
    # Once bs4 is also imported unguarded it is required, and offered as optional no more.
    both = UNDECLARED.replace("import requests\n", "import requests\nimport bs4\n")
    assert parse_toolkit_source(both).optional_requirements() == []
    declared = UNDECLARED.replace("description:", "requirements: beautifulsoup4\ndescription:")
    assert parse_toolkit_source(declared).optional_requirements() == []


@pytest.mark.django_db
def test_an_optional_package_is_offered_in_the_queue_and_holds_nothing_back(client, admin, alice, upload):
    from toolhub.toolkits import building
    from toolhub.toolkits.lifecycle import package_approve, package_reject

    toolkit = upload(alice, UNDECLARED)
    revision = toolkit.current_revision
    assert revision.status_detail == "Waiting for an admin to approve: requests"
    optional = PackageRequest.objects.get(revision=revision, optional=True)
    assert (optional.package.name, optional.import_name, optional.import_line) == ("beautifulsoup4", "bs4", 13)
    client.force_login(admin)
    queue = client.get("/packages/").content.decode()
    assert '<span class="tag optional">optional: the toolkit runs without it</span>' in queue
    assert "facultatif" in client.get("/packages/", headers={"accept-language": "fr"}).content.decode()
    # The tag costs no query per row: more toolkits with optional packages, the same queries.
    with CaptureQueriesContext(connection) as one:
        client.get("/packages/")
    for index in range(4):
        upload(alice, UNDECLARED.replace("title: Page Size", f"title: Page Size {index}"))
    with CaptureQueriesContext(connection) as five:
        client.get("/packages/")
    assert len(five) == len(one)
    client.force_login(alice)
    overview = client.get(reverse("toolkit_detail", args=[toolkit.slug])).content.decode()
    assert "optional: imported under try/except ImportError, installed only once an admin approves it" in overview

    # Rejecting the optional package rejects nothing; approving the required one builds.
    package_reject(name="beautifulsoup4", user=admin, reason="Not here.")
    revision.refresh_from_db()
    assert revision.status == Status.AWAITING_APPROVAL
    package_approve(name="requests", user=admin)
    revision.refresh_from_db()
    assert revision.status == Status.BUILDING
    assert revision.requirement_texts == ["requests"]
    log: list[str] = []
    assert building._build_requirements(revision, log.append) == ["requests"]
    assert log == ["Optional packages not approved, left out: beautifulsoup4"]
    package_approve(name="beautifulsoup4", user=admin)
    assert building._build_requirements(revision, log.append) == ["requests", "beautifulsoup4"]


def test_namespace_imports_map_to_the_distribution_of_their_dotted_name():
    assert distribution_for("google.oauth2.service_account") == "google-auth"
    assert distribution_for("google.auth.transport.requests") == "google-auth"
    assert distribution_for("google.cloud.secret_manager") == "google-cloud-secret-manager"
    assert distribution_for("azure.keyvault.secrets") == "azure-keyvault-secrets"
    assert distribution_for("azure.storage.filedatalake") == "azure-storage-file-datalake"
    assert distribution_for("zope.interface") == "zope-interface"
    # A namespace alone is no distribution: never the `google` scraper or the `azure` meta-package.
    assert distribution_for("google") is None and distribution_for("azure") is None
    assert distribution_for("google.cloud") is None
    # An admin's mapping (by top-level name) still wins.
    assert distribution_for("google.oauth2", {"google": "my-google"}) == "my-google"


def test_a_toolkit_importing_namespaces_asks_for_the_right_distributions_and_not_for_declared_ones():
    parsed = parse_toolkit_source(NAMESPACES)
    assert [(r.name, r.line) for r in parsed.inferred_requirements] == [
        ("google-auth", 5),
        ("google-cloud-bigquery", 7),
        ("google-cloud-storage", 7),
        ("google-genai", 8),
        ("azure-identity", 9),
        ("azure-storage-blob", 10),
        ("azure-core", 11),
        ("llama-index-core", 12),
        ("llama-index-llms-openai", 13),
        ("ruamel-yaml", 14),
        # `import honcho` is provided by the declared honcho-ai, not the process manager `honcho`.
    ]
    undeclared = NAMESPACES.replace("requirements: honcho-ai>=1.0\n", "")
    assert parse_toolkit_source(undeclared).inferred_requirements[-1].name == "honcho"


def test_a_plugin_on_ragflows_older_import_path_asks_for_no_package_named_plugin():
    source = '''
from plugin.llm_tool_plugin import LLMToolMetadata, LLMToolPlugin
import requests


class EchoPlugin(LLMToolPlugin):
    _version_ = "0.1.0"

    @classmethod
    def get_metadata(cls) -> LLMToolMetadata:
        return {"name": "echo", "description": "Say it back.", "parameters": {}}

    def invoke(self, text: str = "") -> str:
        return text
'''
    parsed = parse_toolkit_source(source)
    assert parsed.kind == "ragflow"
    assert [r.name for r in parsed.inferred_requirements] == ["requests"]
    # In an Open WebUI toolkit, `plugin` is just a name on the index.
    assert needs_distribution("plugin") and not needs_distribution("plugin", kind="ragflow")


def _wheel(directory, filename: str, members: dict[str, str]) -> None:
    import zipfile

    with zipfile.ZipFile(directory / filename, "w") as wheel:
        for name, text in members.items():
            wheel.writestr(name, text)


@pytest.mark.django_db
def test_a_declared_distribution_whose_local_wheel_provides_the_import_wins(alice, upload, settings, tmp_path):
    # The name `acme-toolbelt` says nothing about `belt`; its wheel does.
    _wheel(tmp_path, "acme_toolbelt-1.0-py3-none-any.whl", {"belt/__init__.py": "", "acme_toolbelt-1.0.dist-info/RECORD": ""})
    _wheel(
        tmp_path, "acme_toolbelt-2.0-py3-none-any.whl",
        {"belt/__init__.py": "", "buckle.py": "", "acme_toolbelt-2.0.dist-info/RECORD": ""},
    )
    _wheel(tmp_path, "strap_kit-1.0-py3-none-any.whl", {"strap_kit-1.0.dist-info/top_level.txt": "strap\n"})
    settings.TOOLHUB_FIND_LINKS = [str(tmp_path)]
    source = '''"""
title: Belted
requirements: acme-toolbelt, strap-kit
"""
import belt
import buckle
import strap
import requests


class Tools:
    def fasten(self) -> str:
        """Fasten."""
        return "ok"
'''
    revision = upload(alice, source).current_revision
    assert [r["name"] for r in revision.requirements if r.get("inferred")] == ["requests"]
    # Without the wheelhouse the table's guesses stand.
    settings.TOOLHUB_FIND_LINKS = []
    revision = upload(alice, source, slug="belted_again").current_revision
    assert [r["name"] for r in revision.requirements if r.get("inferred")] == ["belt", "buckle", "strap", "requests"]


@pytest.mark.django_db
def test_an_inferred_requirement_waits_in_the_queue_marked_with_toolkit_and_line(client, admin, alice, upload):
    toolkit = upload(alice, UNDECLARED)
    revision = toolkit.current_revision
    assert revision.status == Status.AWAITING_APPROVAL
    assert revision.status_detail == "Waiting for an admin to approve: requests"
    assert revision.requirements == [
        {"name": "requests", "specifier": "", "text": "requests", "inferred": {"module": "requests", "line": 9}},
        {
            "name": "beautifulsoup4", "specifier": "", "text": "beautifulsoup4",
            "inferred": {"module": "bs4", "line": 13}, "optional": True,
        },
    ]
    request = PackageRequest.objects.get(revision=revision, optional=False)
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


@pytest.mark.slow
@pytest.mark.django_db
def test_an_approved_optional_package_goes_into_the_build_and_the_tool_uses_it(admin, alice, upload, build):
    from toolhub.toolkits.lifecycle import packages_approve

    require_sandbox()
    toolkit = upload(alice, UNDECLARED)
    packages_approve(names=["beautifulsoup4", "requests"], user=admin)
    toolkit = build(toolkit)
    revision = toolkit.current_revision
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-2000:])
    assert "beautifulsoup4==" in revision.lock
    invocation = invocation_create(toolkit=toolkit, tool="client", arguments={}, user=alice)
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    assert '"bs4": true' in invocation.result, invocation.error


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
