"""The journey in a real browser: an admin sets a toolkit's Valves (a secret among them)
and a tool uses it; a plain user sets their own settings on My settings."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import run_tool, wait_for_page_checks, wait_until_finished
from tests.conftest import example

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.sandbox]


# Tests ask for these before `worker`, so the build is over before the worker starts.
@pytest.fixture
def string_reverse(alice, ready_toolkit):
    return ready_toolkit(alice, example("string_reverse"))


@pytest.fixture
def library_lookup(alice, ready_toolkit):
    return ready_toolkit(alice, example("library_lookup"))


def _never_shows(page: Page, secret: str) -> None:
    """Neither the page as rendered nor the HTML the server sent holds the secret."""
    pattern = re.compile(rf"\b{re.escape(secret)}\b")
    assert not pattern.search(page.content())
    assert not pattern.search(page.request.get(page.url).text())


def test_an_admin_sets_a_secret_valve_and_the_tool_uses_it(page: Page, login, admin, string_reverse, worker, shot) -> None:
    toolkit = string_reverse
    login(admin)
    page.goto(toolkit.get_absolute_url())
    page.get_by_role("navigation", name="Toolkit").get_by_role("link", name="Valves").click()
    expect(page.get_by_role("heading", name="Valves")).to_be_visible()

    api_key = page.get_by_label("Api key")
    state = page.locator("#id_api_key_state")
    expect(api_key).to_have_attribute("type", "password")
    expect(api_key).to_have_value("")
    expect(state).to_have_text("not set")
    expect(page.get_by_text("Your API key here")).to_be_visible()
    shot("valves-empty")

    api_key.fill("42")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("Settings saved.")
    expect(state).to_have_text("set")
    expect(api_key).to_have_value("")
    expect(api_key).to_have_attribute("placeholder", "Leave empty to keep the stored value")
    expect(page.get_by_label("clear")).not_to_be_checked()
    _never_shows(page, "42")
    shot("valves-set")

    # Saving with the field left empty keeps the stored secret.
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("Settings saved.")
    expect(state).to_have_text("set")

    run_tool(page, toolkit.slug, "reverse_string", String="abc")
    wait_until_finished(page, "succeeded")
    expect(page.locator("#result")).to_have_text("cba")


def test_a_user_sets_their_own_settings(page: Page, login, carol, library_lookup, worker, shot) -> None:
    toolkit = library_lookup
    login(carol)
    page.goto(toolkit.get_absolute_url())
    tabs = page.get_by_role("navigation", name="Toolkit")
    # The admin's Valves are not for a plain user.
    expect(tabs.get_by_role("link", name="Valves")).to_have_count(0)
    tabs.get_by_role("link", name="My settings").click()
    expect(page.get_by_role("heading", name="My settings")).to_be_visible()

    style = page.get_by_label("Style")
    expect(style.locator("option")).to_have_text(["short", "long"])
    expect(style).to_have_value("short")
    expect(page.get_by_text("How much of each entry to show")).to_be_visible()
    style.select_option("long")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("Settings saved.")
    expect(style).to_have_value("long")
    page.reload()
    expect(style).to_have_value("long")
    shot("my-settings")

    # The tool sees carol's choice: the long form of the entry.
    run_tool(page, toolkit.slug, "lookup", Word="valve")
    wait_until_finished(page, "succeeded")
    expect(page.locator("#result")).to_have_text(
        "valve: A setting of a toolkit, edited by an admin (Valves) or by each user (UserValves)."
    )


@pytest.fixture
def schema_only(alice, upload):
    """A toolkit marked ready with a Valves schema of a secret and a bounded number, without a
    build (tests/test_valves.py makes its schemas the same way)."""
    from toolhub.toolkits.models import Status

    toolkit = upload(alice, example("string_reverse"))
    revision = toolkit.current_revision
    revision.valves_schema = {
        "type": "object",
        "properties": {
            "api_key": {"type": "string", "title": "Service key", "description": "From the service's settings page"},
            "retries": {"type": "integer", "minimum": 0, "maximum": 5, "default": 2},
        },
    }
    revision.set_status(Status.READY)
    revision.save()
    return toolkit


@pytest.mark.django_db(transaction=True)
def test_a_typed_secret_survives_a_failed_save_and_can_be_shown_with_the_keyboard(page: Page, login, admin, schema_only) -> None:
    login(admin)
    page.goto(f"/toolkits/{schema_only.slug}/valves/")
    key = page.get_by_label("Service key")
    key.fill("sk-typed-once")
    page.get_by_label("Retries").fill("9")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".errorlist")).to_contain_text("Must be at most 5.")
    # Not lost: still in its input, and said to be not saved yet.
    expect(key).to_have_value("sk-typed-once")
    expect(key).to_have_attribute("type", "password")
    expect(page.locator("#id_api_key_state")).to_have_text("typed, not saved yet")

    # The Show toggle, from the keyboard: Tab from the input reaches it, Space presses it.
    toggle = page.get_by_role("button", name="Show Service key")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    wait_for_page_checks(page)
    key.focus()
    page.keyboard.press("Tab")
    expect(toggle).to_be_focused()
    page.keyboard.press("Space")
    expect(toggle).to_have_attribute("aria-pressed", "true")
    expect(key).to_have_attribute("type", "text")
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    expect(key).to_have_attribute("type", "password")

    page.get_by_label("Retries").fill("3")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("Settings saved.")
    expect(page.locator("#id_api_key_state")).to_have_text("set")
    expect(key).to_have_value("")
