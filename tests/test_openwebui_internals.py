"""Toolkits that import Open WebUI's own modules (`open_webui.*`), which ToolHub cannot
provide: the static import sites, the upload warning, the Overview, the API, and the
runtime's error in place of a bare ModuleNotFoundError.

People (see conftest): alice is a toolkit author, bob another one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from toolhub.accounts.models import ApiToken
from toolhub.toolkits.source_checks import ImportSite, parse_toolkit_source

REPO = Path(__file__).resolve().parent.parent

INTERNALS = '''"""
title: Chat Exporter
"""
import json

from open_webui.models.users import Users

try:
    from open_webui.utils.chat import generate_chat_completion
except ImportError:
    generate_chat_completion = None


class Tools:
    def export(self, chat_id: str) -> str:
        """Export a chat."""
        return json.dumps({"id": chat_id, "users": str(Users)})
'''

PLAIN = INTERNALS.replace("from open_webui.models.users import Users\n", "Users = None\n").replace(
    "from open_webui.utils.chat import generate_chat_completion", "import json as generate_chat_completion"
)


def test_import_sites_have_lines_and_know_optional_imports():
    source = '''"""
title: Sites
"""
import os, requests
from typing import TYPE_CHECKING

try:
    import bs4
    from lxml import etree
except (ValueError, ModuleNotFoundError):
    bs4 = None
try:
    import yaml
except KeyError:
    yaml = None
if TYPE_CHECKING:
    from fastapi import Request


class Tools:
    def go(self) -> str:
        import importlib

        return str(importlib.import_module("dateutil.parser"))
'''
    sites = parse_toolkit_source(source).import_sites
    assert sites == [
        ImportSite("os", 4),
        ImportSite("requests", 4),
        ImportSite("typing", 5),
        ImportSite("bs4", 8, optional=True),
        ImportSite("lxml", 9, optional=True),
        ImportSite("yaml", 13, optional=False),  # KeyError is no ImportError
        ImportSite("fastapi", 17, optional=True, runs=False),  # never runs
        ImportSite("importlib", 22),
        ImportSite("dateutil.parser", 24),
    ]


def test_the_open_webui_imports_are_found_with_their_lines():
    parsed = parse_toolkit_source(INTERNALS)
    assert parsed.open_webui_imports == [
        ImportSite("open_webui.models.users", 6),
        ImportSite("open_webui.utils.chat", 9, optional=True),
    ]


@pytest.mark.django_db
def test_the_upload_warns_naming_the_import_and_its_line(client, alice):
    client.force_login(alice)
    response = client.post(reverse("toolkit_new"), {"source": INTERNALS}, follow=True)
    body = response.content.decode()
    assert "Toolkit uploaded as revision 1." in body
    assert (
        "Line 6 imports open_webui.models.users, a module of Open WebUI itself. ToolHub runs toolkits outside"
        " Open WebUI and cannot provide Open WebUI&#x27;s internals, so this import fails here."
    ) in body
    assert "Line 9 imports open_webui.utils.chat" in body and "so the toolkit loads without it" in body


@pytest.mark.django_db
def test_the_overview_keeps_the_warning_and_other_toolkits_have_none(client, alice, upload):
    upload(alice, INTERNALS)
    upload(alice, PLAIN, slug="plain")
    client.force_login(alice)
    body = client.get(reverse("toolkit_detail", args=["chat_exporter"])).content.decode()
    assert body.count('class="notice notice-awaiting_approval toolkit-warnings"') == 1
    assert "Line 6 imports open_webui.models.users" in body
    plain = client.get(reverse("toolkit_detail", args=["plain"])).content.decode()
    assert "toolkit-warnings" not in plain and "open_webui" not in plain


@pytest.mark.django_db
def test_the_overview_names_a_newer_revision_with_the_import(client, alice, upload):
    from toolhub.toolkits import services
    from toolhub.toolkits.models import Status

    toolkit = upload(alice, PLAIN)
    revision = toolkit.current_revision
    revision.set_status(Status.READY)
    revision.save()
    services.revision_upload(toolkit=toolkit, source=INTERNALS, user=alice)
    client.force_login(alice)
    body = client.get(reverse("toolkit_detail", args=[toolkit.slug])).content.decode()
    assert "Revision 2: Line 6 imports open_webui.models.users" in body


@pytest.mark.django_db
def test_the_overview_in_french(client, alice, upload):
    upload(alice, INTERNALS)
    client.force_login(alice)
    body = client.get(reverse("toolkit_detail", args=["chat_exporter"]), headers={"accept-language": "fr"})
    assert "La ligne 6 importe open_webui.models.users" in body.content.decode()


@pytest.mark.django_db
def test_the_api_returns_the_warnings(client, alice, upload):
    upload(alice, INTERNALS)
    _token, raw = ApiToken.issue(user=alice, name="tests")
    data = client.get("/api/v1/toolkits/chat_exporter", headers={"Authorization": f"Bearer {raw}"}).json()
    assert [(w["code"], w["line"], w["module"], w["optional"]) for w in data["warnings"]] == [
        ("open_webui_import", 6, "open_webui.models.users", False),
        ("open_webui_import", 9, "open_webui.utils.chat", True),
    ]
    assert all(w["revision"] == 1 and "Open WebUI" in w["message"] for w in data["warnings"])


def test_the_runtime_says_why_instead_of_a_bare_module_not_found(tmp_path):
    path = tmp_path / "toolkit.py"
    path.write_text(INTERNALS)
    request = json.dumps({"op": "introspect", "source_path": str(path)}) + "\n"
    out = subprocess.run(
        [sys.executable, "-I", str(REPO / "toolhub/runtime/main.py")],
        input=request, capture_output=True, text=True, timeout=60, check=True,
    )
    final = json.loads(out.stdout.splitlines()[-1])
    assert final["error"] == (
        "OpenWebUIInternals: the toolkit imports `open_webui` on line 6 (`from open_webui.models.users"
        " import Users`), a package of Open WebUI itself. ToolHub runs toolkits outside Open WebUI and"
        " cannot provide Open WebUI's internals: remove the import, or make it optional (in a try/except"
        " ImportError block)."
    )
    # The original error is still in the traceback for the owner.
    assert "ModuleNotFoundError: No module named 'open_webui'" in final["traceback"]


def test_an_optional_open_webui_import_loads(tmp_path):
    path = tmp_path / "toolkit.py"
    path.write_text(INTERNALS.replace("from open_webui.models.users import Users\n", "Users = None\n"))
    request = json.dumps({"op": "introspect", "source_path": str(path)}) + "\n"
    out = subprocess.run(
        [sys.executable, "-I", str(REPO / "toolhub/runtime/main.py")],
        input=request, capture_output=True, text=True, timeout=60, check=True,
    )
    final = json.loads(out.stdout.splitlines()[-1])
    assert final["kind"] == "introspection"
    assert [tool["function"]["name"] for tool in final["tools"]] == ["export"]
