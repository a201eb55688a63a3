"""Reviewed revisions in a real browser: an admin finds an owner's new revision beside the
packages queue, reads its diff (hostile markup shown as text), and approves or rejects it
through the confirmation the page asks for; the owner reads the verdict on the Overview."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.test_revision_review import HONEST, HOSTILE, SCHEMA, SECRET, _introspected
from toolhub.toolkits.models import Revision, Status
from toolhub.toolkits.services import revision_upload
from toolhub.toolkits.valves import store_values

pytestmark = [pytest.mark.browser]

MARKUP = '"<img src=x onerror=window.__pwned=1>"'


def _waiting(upload, alice, admin, slug: str) -> Revision:
    toolkit = upload(alice, HONEST, slug=slug)
    _introspected(toolkit.current_revision, SCHEMA)
    store_values(toolkit=toolkit, values={"api_key": SECRET}, by=admin)
    source = HOSTILE.replace("# https://collector.evil.example/ would be next, given egress.", f"NOTE = {MARKUP}")
    return _introspected(revision_upload(toolkit=toolkit, source=source, user=alice).revision, SCHEMA)


def test_an_admin_rejects_after_confirming_and_the_owner_reads_why(page: Page, login, admin, alice, upload) -> None:
    revision = _waiting(upload, alice, admin, "org_search")
    login(admin)
    page.goto("/packages/")
    page.get_by_role("navigation", name="Admin queues").get_by_role("link", name="Revisions to review (1)").click()
    entry = page.locator(f"#review-{revision.pk}")
    expect(entry).to_contain_text("api_key")
    expect(entry.locator("pre.diff")).to_contain_text(f"+        NOTE = {MARKUP}")
    assert page.evaluate("window.__pwned") is None

    entry.get_by_label("Reason for rejecting").fill("it sends the key <away>")
    # Dismissing the confirmation sends nothing.
    page.once("dialog", lambda dialog: dialog.dismiss())
    entry.get_by_role("button", name="Reject").click()
    expect(entry).to_be_visible()
    assert Revision.objects.get(pk=revision.pk).status == Status.AWAITING_REVIEW

    page.once("dialog", lambda dialog: dialog.accept())
    entry.get_by_role("button", name="Reject").click()
    expect(page.locator(".messages")).to_contain_text("Rejected revision 2 of org_search: the current revision stays.")
    expect(page.get_by_text("No revisions wait for review.")).to_be_visible()

    login(alice)
    page.goto("/toolkits/org_search/")
    expect(page.locator("#toolkit-head")).to_contain_text("Rejected in review by admin: it sends the key <away>")


def test_an_admin_approves_after_confirming(page: Page, login, admin, alice, upload) -> None:
    revision = _waiting(upload, alice, admin, "org_search")
    login(admin)
    page.goto("/packages/reviews/")
    dialogs: list[str] = []

    def accept(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.locator(f"#review-{revision.pk}").get_by_role("button", name="Approve").click()
    expect(page.locator(".messages")).to_contain_text("Approved revision 2 of org_search: it is current now.")
    assert re.search(r"Approve revision 2 of org_search\? It becomes current", dialogs[0])
    assert Revision.objects.get(pk=revision.pk).status == Status.READY
