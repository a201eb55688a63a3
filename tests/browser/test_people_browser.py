"""The Users and Groups pages in Chromium: used with the keyboard only, on a 390 px phone, and in
French. axe checks every page these tests open (tests/browser/conftest.py)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from playwright.sync_api import Page, expect

from tests.browser.helpers import PHONE, assert_fits_the_screen

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

User = get_user_model()


def _accept_confirmations(page: Page) -> None:
    page.on("dialog", lambda dialog: dialog.accept())


def test_an_admin_adds_a_person_and_changes_them_with_the_keyboard_only(page: Page, login, admin) -> None:
    Group.objects.create(name="sales")
    login(admin)
    _accept_confirmations(page)
    page.goto("/people/")
    expect(page.get_by_role("heading", name="Users")).to_be_visible()
    page.get_by_role("link", name="Add a person").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Add a person")).to_be_visible()

    page.get_by_label("Username").focus()
    page.keyboard.type("dave")
    page.keyboard.press("Tab")
    page.keyboard.type("dave@example.org")
    page.keyboard.press("Tab")  # the role radios: "User" is checked
    page.keyboard.press("ArrowRight")  # Author
    page.keyboard.press("Tab")  # the "sales" checkbox
    page.keyboard.press("Space")
    page.keyboard.press("Tab")  # how they sign in: the invitation is checked
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Invitation for dave")).to_be_visible()
    expect(page.locator("#invite-link")).to_contain_text("/accounts/invite/thi_")
    expect(page.get_by_role("button", name="Copy")).to_be_visible()

    dave = User.objects.get(username="dave")
    assert dave.has_perm("toolkits.add_toolkit") and list(dave.groups.exclude(name="Toolkit authors").values_list("name", flat=True)) == ["sales"]

    page.get_by_role("link", name="Back to dave").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="dave")).to_be_visible()
    expect(page.get_by_role("radio", name="Author")).to_be_checked()
    page.get_by_role("radio", name="Author").focus()
    page.keyboard.press("ArrowRight")  # Admin
    page.get_by_role("button", name="Save").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("Changes to dave saved.")
    expect(page.get_by_role("radio", name="Admin")).to_be_checked()

    page.get_by_role("button", name="Deactivate").focus()
    page.keyboard.press("Enter")  # confirmed by the dialog handler
    expect(page.get_by_role("status")).to_contain_text("dave is deactivated")
    assert not User.objects.get(username="dave").is_active
    page.get_by_role("button", name="Activate again").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("dave is active again.")


def test_an_admin_runs_a_group_with_the_keyboard_only(page: Page, login, admin, carol) -> None:
    login(admin)
    _accept_confirmations(page)
    page.goto("/groups/")
    page.get_by_label("New group").focus()
    page.keyboard.type("Support")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Support")).to_be_visible()

    page.get_by_label("Add people (usernames, separated by spaces or commas)").focus()
    page.keyboard.type("carol")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="1 member")).to_be_visible()
    page.get_by_role("button", name="Remove carol").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="0 members")).to_be_visible()

    page.get_by_role("link", name="Delete this group").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Delete the group Support?")).to_be_visible()
    page.get_by_role("button", name="Delete group").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("Group Support deleted.")
    assert not Group.objects.filter(name="Support").exists()


def test_the_users_and_groups_pages_fit_a_phone(page: Page, login, admin, alice, carol) -> None:
    group = Group.objects.create(name="a-group-with-a-rather-long-name-for-a-phone")
    group.user_set.add(carol, alice)
    page.set_viewport_size(PHONE)
    login(admin)
    for path, heading in (
        ("/people/", "Users"), ("/people/new/", "Add a person"), ("/people/user/carol/", "carol"),
        ("/groups/", "Groups"), (f"/groups/{group.pk}/", group.name), (f"/groups/{group.pk}/delete/", None),
    ):
        page.goto(path)
        if heading:
            expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
        assert_fits_the_screen(page)
    # On the list, each person is a card whose first line is their name.
    page.goto("/people/")
    card = page.locator("table.people tbody tr").filter(has_text="carol@example.org")
    expect(card.get_by_role("link", name="carol")).to_be_visible()


def test_the_pages_read_in_french(page: Page, login, admin, carol) -> None:
    Group.objects.create(name="ventes").user_set.add(carol)
    login(admin)
    # The switcher submits itself once the page's script has run: pick it on a loaded page.
    page.goto("/people/")
    page.wait_for_load_state("load")
    page.get_by_label("Language").select_option("fr")
    expect(page.locator("html")).to_have_attribute("lang", "fr")
    nav = page.get_by_role("navigation", name="Principale")
    nav.get_by_role("link", name="Utilisateurs").click()
    expect(page.get_by_role("heading", name="Utilisateurs")).to_be_visible()
    expect(page.get_by_role("link", name="Ajouter une personne")).to_be_visible()
    expect(page.get_by_label("Rôle")).to_be_visible()
    page.get_by_role("link", name="carol").click()
    expect(page.get_by_role("heading", name="Ce qu’il ou elle peut utiliser")).to_be_visible()
    expect(page.get_by_role("button", name="Désactiver")).to_be_visible()
    nav.get_by_role("link", name="Groupes").click()
    expect(page.get_by_role("button", name="Créer le groupe")).to_be_visible()
    page.get_by_role("link", name="ventes").click()
    expect(page.get_by_role("heading", name="1 membre")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/groups/\d+/$"))
