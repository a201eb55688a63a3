"""The journey in a real browser: an admin approves a package in the queue and watches
the toolkit's environment get built by a real worker, live on its Environment tab."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import example, toolkit_source
from toolhub.packages.models import Package
from toolhub.toolkits.models import Status

pytestmark = [pytest.mark.browser, pytest.mark.worker]

# Locking with pip-compile and building with uv from the offline wheelhouse takes a few
# seconds; a loaded CI machine gets plenty more.
BUILD_TIMEOUT_MS = 120_000


def test_an_admin_approves_a_package_and_the_toolkit_becomes_ready(
    page: Page, login, admin, alice, upload, worker, shot
) -> None:
    toolkit = upload(alice, example("friendly_sizes"))
    assert toolkit.current_revision.status == Status.AWAITING_APPROVAL

    login(admin)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Packages").click()
    expect(page.get_by_role("heading", name="Package approvals")).to_be_visible()
    row = page.locator("tr[data-package='humanize']")
    expect(row).to_contain_text("friendly_sizes #1")
    expect(row).to_contain_text(">=4")
    shot("package-queue-before-build")

    page.get_by_role("checkbox", name="humanize").check()
    page.get_by_role("button", name="Approve the selected packages").click()
    expect(page.locator(".messages")).to_contain_text("Approved: humanize")
    expect(page.get_by_text("No packages here.")).to_be_visible()
    expect(page.get_by_role("link", name=re.compile(r"^Approved \(1\)$"))).to_be_visible()

    page.goto(f"/toolkits/{toolkit.slug}/environment/")
    environment = page.locator("#environment")
    # Locking takes seconds, so the page opens on a build in progress.
    expect(environment.locator(".badge")).to_have_attribute("data-status", "building")
    expect(environment).to_have_attribute("hx-trigger", "every 1s")
    shot("environment-building")
    # The test does not reload: htmx polls the fragment until the build ends (and then
    # reloads the page once, so everything on it is up to date).
    expect(environment.locator(".badge")).to_have_attribute("data-status", "ready", timeout=BUILD_TIMEOUT_MS)
    expect(environment).to_contain_text("Revision 1: Ready")
    expect(environment.locator("#build-log")).to_contain_text("humanize")
    expect(environment.locator("#build-log")).to_contain_text("Environment ready")
    # Admins see the lock, with hashes.
    environment.get_by_text("Lock file").click()
    expect(environment.locator("details pre")).to_contain_text("--hash=sha256:")
    # The status at the top of the page is up to date too, and the "Queued for build" notice gone.
    expect(page.locator("h1 .badge")).to_have_attribute("data-status", "ready")
    expect(page.locator("#toolkit-head .notice")).to_have_count(0)
    # Polling stops once the build is over.
    expect(environment).not_to_have_attribute("hx-get", re.compile(".*"))
    shot("environment-ready")

    page.get_by_role("link", name="Tools").click()
    expect(page.locator("#tool-natural_size form")).to_be_visible()


def test_an_admin_approves_with_the_index_information_and_an_unknown_name_is_refused(
    page: Page, login, admin, alice, local_index, worker, upload, shot
) -> None:
    """What the configured index (a real local PEP 691 index) says is looked up by the worker
    and appears in the queue without a reload; a name the index does not know is flagged, and
    approving it takes an explicit "approve anyway"."""
    upload(alice, toolkit_source("Sizes", "humanize>=4, humanise-typo"), slug="sizes")
    login(admin)
    menu = page.get_by_role("navigation", name="Main")
    expect(menu.locator("#pending-packages")).to_contain_text("2")
    menu.get_by_role("link", name=re.compile("^Packages")).click()
    humanize = page.locator("tr[data-package='humanize']")
    # The worker's lookup arrives while the page is open (the cell polls until it has).
    expect(humanize.locator(".index-info")).to_have_attribute("data-index-state", "found", timeout=30_000)
    for text in ("4.9.0", "2023-11-02", "Python humanize utilities", "Licence: MIT", "wheel for Python 3.11", "1 dependency"):
        expect(humanize).to_contain_text(text)
    typo = page.locator("tr[data-package='humanise-typo']")
    expect(typo.locator(".index-info")).to_have_attribute("data-index-state", "missing", timeout=30_000)
    expect(typo).to_contain_text("Not on the index")
    expect(humanize.locator(".index-info")).not_to_have_attribute("hx-get", re.compile(".*"))
    shot("package-queue")

    # The unknown name's own Approve button waits for the confirmation; approving it with
    # the others, without it, is refused by the server.
    expect(typo.get_by_role("button", name="Approve humanise-typo")).to_be_disabled()
    typo.get_by_role("checkbox", name="humanise-typo", exact=True).check()
    page.get_by_role("button", name="Approve the selected packages").click()
    expect(page.locator(".messages")).to_contain_text("humanise-typo is not on the package index")
    expect(page.locator("tr[data-package='humanise-typo']")).to_be_visible()

    page.locator("tr[data-package='humanize']").get_by_role("button", name="Approve humanize").click()
    expect(page.locator(".messages")).to_contain_text("Approved: humanize")
    expect(page.locator("tr[data-package='humanize']")).to_have_count(0)
    expect(menu.locator("#pending-packages")).to_contain_text("1")

    # Ticked, "approve anyway" approves it.
    typo = page.locator("tr[data-package='humanise-typo']")
    typo.get_by_label("Approve humanise-typo anyway").check()
    expect(typo.get_by_role("button", name="Approve humanise-typo")).to_be_enabled()
    typo.get_by_role("button", name="Approve humanise-typo").click()
    expect(page.locator(".messages")).to_contain_text("Approved: humanise-typo")
    expect(page.get_by_text("No packages here.")).to_be_visible()
    expect(menu.locator("#pending-packages")).to_have_count(0)
    assert dict(Package.objects.values_list("name", "status")) == {"humanize": "approved", "humanise-typo": "approved"}
