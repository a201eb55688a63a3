"""The Usage page and the toolkit Overview's usage block in Chromium: axe finds no serious or
critical violation, an admin reaches the page and changes the grouping with the keyboard
only, the figures are those of the invocations, and both fit a 390 px phone without the page
scrolling sideways. Screenshots: usage.png, usage-overview.png, phone-usage.png."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import PHONE, assert_fits_the_screen
from tests.conftest import example
from tests.usage_fixtures import fold_all, seed
from toolhub.runs.models import FINISHED, Invocation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SERIOUS = """() => window.__axeDone.then(() => window.axe.run(document)).then(r => r.violations
  .filter(v => v.impact === "serious" || v.impact === "critical")
  .map(v => v.id + ": " + v.help + " " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(" | ")))"""


@pytest.fixture
def history(admin, alice, carol, upload):
    toolkit = upload(alice, example("library_lookup"))
    seed(toolkits=[toolkit], users=[alice, carol, admin], clients=[], count=300, hours=24 * 5)
    fold_all()
    return toolkit


def _no_violations(page: Page) -> None:
    page.wait_for_function("() => window.__axeDone !== undefined")
    assert page.evaluate(SERIOUS) == []


def _tab_to(page: Page, locator, limit: int = 60) -> None:
    """Press Tab until the element has the focus, as a keyboard user would."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if locator.evaluate("el => el === document.activeElement"):
            return
    raise AssertionError("never reached by Tab")


def test_an_admin_uses_the_usage_page_with_the_keyboard_only(page: Page, login, admin, history, shot) -> None:
    login(admin)
    _tab_to(page, page.get_by_role("navigation", name="Main").get_by_role("link", name="Usage"))
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Usage", exact=True)).to_be_visible()
    _no_violations(page)
    finished = Invocation.objects.filter(status__in=FINISHED).count()
    expect(page.locator("#usage-calls")).to_have_text(str(finished))
    expect(page.locator("svg.usage-chart").first).to_be_visible()

    # Group by user: Tab to the select, pick with the arrow keys, Tab to Show, Enter.
    group = page.get_by_label("Group by")
    _tab_to(page, group)
    while group.input_value() != "user":
        page.keyboard.press("ArrowDown")
    _tab_to(page, page.get_by_role("button", name="Show"))
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"group=user"))
    rows = page.locator("#usage-groups tbody tr")
    expect(rows).to_have_count(3)
    shown = sum(int(t) for t in page.locator("#usage-groups td.c-calls").all_inner_texts())
    assert shown == finished
    _no_violations(page)
    shot("usage")

    # The CSV link is reachable from the keyboard too.
    _tab_to(page, page.locator("#usage-csv"))
    with page.expect_download() as download:
        page.keyboard.press("Enter")
    assert download.value.suggested_filename.startswith("usage-user-")


def test_the_overview_usage_block_is_accessible(page: Page, login, alice, history, shot) -> None:
    login(alice)
    page.goto(f"/toolkits/{history.slug}/")
    expect(page.get_by_role("heading", name="Usage over the last 7 days")).to_be_visible()
    expect(page.locator("#toolkit-last-errors")).to_be_visible()
    _no_violations(page)
    page.locator("#usage-heading").scroll_into_view_if_needed()
    shot("usage-overview")


def test_the_usage_pages_fit_a_phone(page: Page, login, admin, history, shot) -> None:
    page.set_viewport_size(PHONE)
    login(admin)
    page.goto("/usage/?range=30d&group=tool")
    expect(page.locator("#usage-groups")).to_be_visible()
    assert_fits_the_screen(page)
    _no_violations(page)
    shot("phone-usage")
    page.goto(f"/toolkits/{history.slug}/")
    expect(page.locator("#toolkit-usage-tools")).to_be_visible()
    assert_fits_the_screen(page)
