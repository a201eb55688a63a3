"""A 390 px phone: the top bar folds behind a Menu button, and the toolkit list, a toolkit's
revisions and the run history are cards with the status on their first line, so the status is on screen without
scrolling sideways. Screenshots (the shot fixture) of the list and a run page are kept in
docs/screenshots/ (phone-toolkit-list.png, phone-run.png)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.helpers import PHONE, assert_fits_the_screen
from tests.conftest import example, toolkit_source
from toolhub.runs.models import Event, Invocation, RunStatus
from toolhub.toolkits.models import Revision, Status

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]



def _in_view(element: Locator) -> None:
    """The element is wholly inside the phone's screen as the page opens, not scrolled to."""
    expect(element).to_be_visible()
    box = element.bounding_box()
    assert box is not None
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], box
    assert page_is_not_scrolled(element.page)


def page_is_not_scrolled(page: Page) -> bool:
    return page.evaluate("window.scrollX === 0 && window.scrollY === 0")


def test_the_top_bar_folds_behind_a_menu_button(page: Page, login, admin) -> None:
    page.set_viewport_size(PHONE)
    login(admin)
    menu = page.get_by_role("button", name="Menu")
    nav = page.get_by_role("navigation", name="Main")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(nav).to_be_hidden()
    # One slim line instead of a fifth of the screen.
    height = page.locator("header.topbar").bounding_box()["height"]
    assert height < PHONE["height"] / 12, height

    # From the keyboard: Tab past the skip link and the brand to the button, Enter opens it.
    menu.focus()
    page.keyboard.press("Enter")
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(nav.get_by_role("link", name="Toolkits")).to_be_visible()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    page.keyboard.press("Escape")
    expect(nav).to_be_hidden()
    expect(menu).to_be_focused()

    menu.click()
    nav.get_by_role("link", name="History").click()
    expect(page.get_by_role("heading", name="History")).to_be_visible()
    expect(page.get_by_role("navigation", name="Main")).to_be_hidden()


def test_on_a_wide_screen_there_is_no_menu_button(page: Page, login, admin) -> None:
    login(admin)
    expect(page.get_by_role("button", name="Menu")).to_be_hidden()
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Toolkits")).to_be_visible()


def test_the_toolkit_list_is_cards_with_the_status_in_view(page: Page, login, alice, upload, shot) -> None:
    for n, title in enumerate(["Weather Forecasts For Every City", "Library Lookup", "Sizes"]):
        toolkit = upload(alice, toolkit_source(title), slug=f"kit_{n}")
        Revision.objects.filter(toolkit=toolkit).update(status=[Status.READY, Status.FAILED, Status.BUILDING][n])
    page.set_viewport_size(PHONE)
    login(alice)
    cards = page.locator("table.cards tbody tr")
    expect(cards).to_have_count(3)
    # Even the card whose title wraps has its status on screen, beside the title.
    for n in range(3):
        _in_view(cards.nth(n).locator(".card-status .badge"))
    first = cards.first
    # Each card's other fields are labelled, the header row being out of sight.
    expect(first.locator("td[data-label='Author']")).to_be_visible()
    expect(page.locator("table.cards thead")).not_to_be_in_viewport()
    assert_fits_the_screen(page)
    shot("phone-toolkit-list")

    # A toolkit's revisions are cards too.
    page.goto("/toolkits/kit_1/revisions/")
    _in_view(page.locator("table.cards tbody tr").first.locator(".card-status .badge"))


def test_a_run_page_and_my_runs_show_the_status_in_view(page: Page, login, carol, alice, upload, shot) -> None:
    toolkit = upload(alice, example("library_lookup"), slug="library_lookup")
    revision = toolkit.latest_revision()
    Revision.objects.filter(pk=revision.pk).update(status=Status.READY)
    run = Invocation.objects.create(
        toolkit=toolkit, revision=revision, tool="lookup", user=carol, arguments={"word": "valve"},
        status=RunStatus.SUCCEEDED, result="valve: a setting that controls a tool", result_type="text",
    )
    Event.objects.create(invocation=run, seq=1, type="status", data={"description": "Looking up", "done": True})
    page.set_viewport_size(PHONE)
    login(carol)
    page.goto(f"/invocations/{run.id}/")
    _in_view(page.locator("#live-status .badge"))
    expect(page.locator("#live-status .badge")).to_have_attribute("data-status", "succeeded")
    shot("phone-run")

    page.goto("/history/")
    card = page.locator("table.cards tbody tr").first
    _in_view(card.locator(".card-status .badge"))
    expect(card.locator("td[data-label='Tool']")).to_contain_text("lookup")
    shot("phone-my-runs")
