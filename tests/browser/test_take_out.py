"""Starting a toolkit and taking it out again, in Chromium: the editor's starter template goes
through a real build (worker, sandbox) to a run that shows its status line and citation; an
export of ticked toolkits, downloaded from the list, imports back into the same sources; a
clone from the Source tab is a new toolkit with the same code. Screenshots: docs/screenshots/
editor-template.png and source-take-out.png."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import RUN_TIMEOUT_MS, wait_until_finished
from tests.conftest import toolkit_source
from toolhub.toolkits import starter
from toolhub.toolkits.models import Toolkit
from toolhub.toolkits.services import toolkit_delete

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BUILD_TIMEOUT_MS = 120_000


@pytest.mark.worker
@pytest.mark.sandbox
def test_the_starter_template_builds_and_runs_with_its_status_line_and_citation(page: Page, login, alice, worker, shot) -> None:
    login(alice)
    page.get_by_role("link", name="New toolkit").click()
    page.get_by_role("link", name=re.compile("Start from a template")).click()
    expect(page.locator(".cm-content")).to_contain_text("class UserValves(BaseModel):")
    page.get_by_text("Snippets for the common parts").click()
    expect(page.locator("#snippet-confirmation")).to_contain_text("__event_call__")
    shot("editor-template")
    page.get_by_label("Slug").fill("starter")
    page.get_by_role("button", name="Check and upload").click()
    expect(page).to_have_url(re.compile(r"/toolkits/starter/$"))
    expect(page.locator("#readiness")).to_have_attribute("data-status", "ready", timeout=BUILD_TIMEOUT_MS)
    assert Toolkit.objects.get(slug="starter").current_revision.source == starter.STARTER

    page.goto("/toolkits/starter/tools/?tool=greet")
    form = page.locator("#tool-greet form.run-form")
    form.get_by_label("name").fill("Ann")
    form.get_by_role("button", name="Run").click()
    wait_until_finished(page, "succeeded")
    live = page.locator("#live")
    expect(live.locator("#result")).to_have_text("Hello, Ann!", timeout=RUN_TIMEOUT_MS)
    expect(live.locator(".citation")).to_contain_text("My toolkit")
    expect(live.locator("#status-current")).to_have_text("Done")


def test_an_export_of_ticked_toolkits_imports_back_into_the_same_sources(page: Page, login, admin, alice, upload) -> None:
    upload(alice, toolkit_source("Echo"), slug="echo")
    upload(alice, toolkit_source("Clock"), slug="clock")
    upload(alice, toolkit_source("Other"), slug="other")
    before = {t.slug: t.current_revision.source for t in Toolkit.objects.filter(slug__in=["echo", "clock"])}
    login(admin)
    page.get_by_label("Export echo").check()
    page.get_by_label("Export clock").check()
    with page.expect_download() as download:
        page.get_by_role("button", name="Export the ticked toolkits for Open WebUI (JSON)").click()
    exported = download.value.path().read_text(encoding="utf-8")
    assert download.value.suggested_filename == "toolhub-export.json"
    assert sorted(entry["id"] for entry in json.loads(exported)) == ["clock", "echo"]

    for slug in ("echo", "clock"):
        toolkit_delete(toolkit=Toolkit.objects.get(slug=slug))
    page.goto("/toolkits/new/import/")
    page.get_by_label("Open WebUI export (JSON)").set_input_files(
        files=[{"name": "toolhub-export.json", "mimeType": "application/json", "buffer": exported.encode()}]
    )
    page.get_by_role("button", name="Import", exact=True).click()
    expect(page.locator(".verdict-loaded")).to_have_count(2)
    after = {t.slug: t.latest_revision().source for t in Toolkit.objects.filter(slug__in=["echo", "clock"])}
    assert after == before


def test_a_clone_from_the_source_tab_is_a_new_toolkit_with_the_same_code(page: Page, login, alice, upload, shot) -> None:
    upload(alice, toolkit_source("Echo"), slug="echo")
    login(alice)
    page.goto("/toolkits/echo/source/")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download revision 1 (.py)").click()
    assert download.value.suggested_filename == "echo-r1.py"
    assert download.value.path().read_text(encoding="utf-8") == toolkit_source("Echo")
    shot("source-take-out")
    page.get_by_label("Slug of the copy").fill("echo_two")
    page.get_by_role("button", name="Clone revision 1").click()
    expect(page).to_have_url(re.compile(r"/toolkits/echo_two/$"))
    expect(page.get_by_text("Cloned echo as echo_two.")).to_be_visible()
    assert Toolkit.objects.get(slug="echo_two").latest_revision().source == toolkit_source("Echo")
