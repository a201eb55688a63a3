"""From upload to first run in a real browser: the uploader's Overview
says what the new toolkit waits for, follows it live while an admin approves its package and
a real worker builds it, and once ready offers its tool, one click from the playground."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import example
from toolhub.toolkits import lifecycle

pytestmark = [pytest.mark.browser, pytest.mark.worker]

BUILD_TIMEOUT_MS = 120_000


def test_the_overview_follows_an_upload_to_its_first_run(page: Page, login, admin, alice, worker, upload, shot) -> None:
    toolkit = upload(alice, example("friendly_sizes"))
    login(alice)
    page.goto(f"/toolkits/{toolkit.slug}/")
    block = page.locator("#readiness")
    expect(block).to_have_attribute("data-status", "awaiting_approval")
    expect(block).to_contain_text("Waiting for package approval: humanize.")
    expect(block.get_by_role("link", name="See its packages and environment")).to_have_attribute(
        "href", f"/toolkits/{toolkit.slug}/environment/"
    )
    expect(block).to_have_attribute("hx-trigger", "every 2s")
    shot("overview-waiting")

    # An admin approves meanwhile; the page is not reloaded by the test.
    lifecycle.package_approve(name="humanize", user=admin)
    expect(page.locator("#readiness")).to_have_attribute("data-status", "ready", timeout=BUILD_TIMEOUT_MS)
    block = page.locator("#readiness")
    expect(block).to_contain_text("Ready — try natural_size")
    expect(block).to_contain_text("humanize approved by admin")
    expect(page.locator("h1 .badge")).to_have_attribute("data-status", "ready")
    # Settled: no more polling.
    expect(block).not_to_have_attribute("hx-get", re.compile(".*"))
    shot("overview-ready")

    block.get_by_role("link", name="natural_size").click()
    expect(page).to_have_url(re.compile(rf"/toolkits/{toolkit.slug}/tools/\?tool=natural_size$"))
    expect(page.locator("#tool-natural_size form.run-form")).to_be_visible()
