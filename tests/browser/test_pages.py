"""The pages around the journeys: logging in, API tokens, the admin's history, and the main
pages on a phone-sized screen."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import PHONE, assert_fits_the_screen
from tests.conftest import example

pytestmark = pytest.mark.browser


def test_a_wrong_password_is_refused_and_the_right_one_lets_in(page: Page, admin, shot) -> None:
    page.goto("/toolkits/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/toolkits/$"))
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("p.error")).to_contain_text("didn't match")
    shot("login-error")
    page.get_by_label("Password").fill("pw-admin-1")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/toolkits/$"))
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/$"))


def test_a_token_is_shown_once_and_can_be_revoked(page: Page, login, alice, shot) -> None:
    login(alice)
    page.get_by_role("link", name="API tokens").click()
    expect(page.get_by_text("You have no API tokens.")).to_be_visible()
    page.get_by_label("Name").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token").inner_text().strip()
    assert len(token) >= 20
    row = page.locator("table tbody tr", has_text="laptop")
    expect(row.locator("code")).to_have_text(re.compile(r"^\S+…$"))
    assert token not in row.inner_text()
    shot("api-tokens")

    page.goto("/account/tokens/")
    assert token not in page.content()
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("table tbody tr", has_text="laptop").get_by_role("button", name="Revoke").click()
    expect(page.locator(".messages")).to_contain_text("Token laptop revoked.")
    expect(page.locator("table tbody tr", has_text="laptop")).to_contain_text("revoked")


def test_the_history_is_for_admins_and_everyone_else_has_my_runs(page: Page, login, admin, carol, shot) -> None:
    login(admin)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="History").click()
    expect(page.get_by_role("heading", name="Invocation history")).to_be_visible()
    expect(page.get_by_text("No invocations match.")).to_be_visible()
    shot("history")

    # Everyone else has "My runs" instead: the same page, with their own runs only.
    login(carol)
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="History")).to_have_count(0)
    nav.get_by_role("link", name="My runs").click()
    expect(page.get_by_role("heading", name="My runs")).to_be_visible()
    expect(page.get_by_label("User")).to_have_count(0)


def test_the_main_pages_fit_a_phone(page: Page, login, alice, upload, shot) -> None:
    toolkit = upload(alice, example("library_lookup"))
    page.set_viewport_size(PHONE)
    login(alice)
    assert_fits_the_screen(page)
    shot("phone-toolkit-list")
    for tab, path in [("overview", ""), ("source", "source/"), ("revisions", "revisions/"), ("tools", "tools/")]:
        page.goto(f"/toolkits/{toolkit.slug}/{path}")
        expect(page.locator("h1")).to_contain_text("Library Lookup")
        assert_fits_the_screen(page)
        shot(f"phone-{tab}")
    page.goto("/toolkits/new/")
    assert_fits_the_screen(page)


def test_the_clients_page_says_what_a_credential_can_reach(page: Page, login, admin, shot) -> None:
    """Every page a browser test opens is checked by axe (tests/browser/conftest.py)."""
    login(admin)
    page.goto("/clients/")
    scope = page.get_by_role("region", name="What a client credential can reach")
    expect(scope).to_be_visible()
    expect(scope.locator("li")).to_have_count(5)
    expect(scope).to_contain_text("/mcp and /mcp/{slug}")
    page.get_by_label("Name").fill("Open WebUI")
    page.get_by_role("checkbox", name=re.compile("Acts for its users")).check()
    page.get_by_role("checkbox", name=re.compile("May act for admins")).check()
    page.get_by_role("button", name="Create client").click()
    expect(page.locator("#new-token")).to_be_visible()
    expect(page.locator("table tbody tr", has_text="Open WebUI")).to_contain_text("also for admins")
    shot("clients-scope")
    page.set_viewport_size(PHONE)
    page.reload()
    expect(scope).to_be_visible()
    assert_fits_the_screen(page)
