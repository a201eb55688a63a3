"""axe-core on every page of the dashboard (besides the check every browser test gets on each
page it opens, see conftest.py), and the skip link."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import PHONE, assert_fits_the_screen
from toolhub.runs.models import Event, Invocation, RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.sandbox]

SERIOUS = """() => window.__axeDone.then(() => window.axe.run(document)).then(r => r.violations
  .filter(v => v.impact === "serious" || v.impact === "critical")
  .map(v => v.id + ": " + v.help + " " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(" | ")))"""


def _violations(page: Page, url: str) -> list[str]:
    page.goto(url)
    page.wait_for_function("() => window.__axeDone !== undefined")
    return page.evaluate(SERIOUS)


@pytest.fixture
def ready(alice, ready_toolkit):
    from tests.conftest import example

    return ready_toolkit(alice, example("library_lookup"))


def test_every_page_has_no_serious_or_critical_violations(page: Page, login, admin, alice, ready) -> None:
    done = Invocation.objects.create(
        toolkit=ready, revision=ready.current_revision, tool="lookup", user=admin,
        arguments={"word": "valve"}, status=RunStatus.SUCCEEDED, result="valve: a setting", result_type="text",
    )
    Event.objects.create(invocation=done, seq=1, type="status", data={"description": "Looking up", "done": True})
    Event.objects.create(invocation=done, seq=2, type="message", data={"content": "Found **one**"})
    waiting = Invocation.objects.create(
        toolkit=ready, revision=ready.current_revision, tool="lookup", user=admin, arguments={"word": "x"},
        status=RunStatus.AWAITING_INPUT, pending_call={"type": "input", "data": {"title": "Which?", "message": "Pick one"}},
    )
    anonymous = ["/accounts/login/"]
    slug = ready.slug
    signed_in = [
        "/toolkits/", "/toolkits/new/", f"/toolkits/{slug}/", f"/toolkits/{slug}/tools/",
        f"/toolkits/{slug}/source/", f"/toolkits/{slug}/edit/", f"/toolkits/{slug}/revisions/",
        f"/toolkits/{slug}/upload/", f"/toolkits/{slug}/environment/", f"/toolkits/{slug}/valves/",
        f"/toolkits/{slug}/settings/", f"/toolkits/{slug}/translations/", f"/toolkits/{slug}/delete/",
        "/packages/", "/packages/reviews/", "/history/", "/account/tokens/", f"/invocations/{done.id}/", f"/invocations/{waiting.id}/",
        "/toolkits/no-such-toolkit/", "/connect/", f"/connect/?toolkit={slug}", "/guides/connect/",
        "/clients/", f"/toolkits/{slug}/connect/",
    ]
    found = {url: _violations(page, url) for url in anonymous}
    login(admin)
    found.update({url: _violations(page, url) for url in signed_in})
    bad = {url: problems for url, problems in found.items() if problems}
    assert not bad, "\n".join(f"{url}: {p}" for url, problems in bad.items() for p in problems)


RULES = """(rules) => window.__axeDone.then(() => window.axe.run(document, {runOnly: {type: "rule", values: rules}}))
  .then(r => r.violations.map(v => v.id + ": " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(" | ")))"""


def test_at_390_px_no_region_scrolls_out_of_the_keyboards_reach(page: Page, login, admin, alice, ready, upload) -> None:
    from tests.conftest import toolkit_source

    # A package waiting for approval, so the package queue has its wide table.
    upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")
    page.set_viewport_size(PHONE)
    login(admin)
    slug = ready.slug
    found = {}
    for url in ("/packages/", f"/toolkits/{slug}/tools/", f"/toolkits/{slug}/connect/", "/connect/", "/clients/",
                f"/toolkits/{slug}/revisions/", "/account/tokens/", "/history/"):
        page.goto(url)
        page.wait_for_function("() => window.__axeDone !== undefined")
        found[url] = page.evaluate(RULES, ["scrollable-region-focusable", "empty-table-header", "heading-order"])
        if url == "/packages/":
            expect(page.locator("[data-package='humanize']").first).to_be_attached()
        assert_fits_the_screen(page)
    bad = {url: problems for url, problems in found.items() if problems}
    assert not bad, bad


def test_the_skip_link_is_the_first_stop_and_jumps_to_the_content(page: Page, login, alice) -> None:
    login(alice)
    page.goto("/toolkits/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("main#main")).to_be_focused()
    # The next Tab lands inside the content, not back in the top bar.
    page.keyboard.press("Tab")
    assert page.evaluate("document.querySelector('main').contains(document.activeElement)")
