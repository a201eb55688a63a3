"""__event_call__ questions as modal dialogs, answered with the keyboard only: the dialog
takes the focus, keeps Tab inside, Esc answers Cancel, and the page says the answer was sent."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import RUN_TIMEOUT_MS, run_tool, wait_until_finished
from tests.browser.test_tools import CHECKS

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.sandbox]


@pytest.fixture
def checks(alice, ready_toolkit):
    return ready_toolkit(alice, CHECKS)


def _is_modal(page: Page) -> bool:
    return page.evaluate("document.querySelector('dialog.ask').matches(':modal')")


def test_a_confirmation_is_answered_with_the_keyboard_only(page: Page, login, alice, checks, worker, shot) -> None:
    login(alice)
    run_tool(page, checks.slug, "ask_first", Target="report.txt")
    dialog = page.get_by_role("dialog", name="Sure?")
    expect(dialog).to_be_visible(timeout=RUN_TIMEOUT_MS)
    assert _is_modal(page)
    confirm = dialog.get_by_role("button", name="Confirm")
    cancel = dialog.get_by_role("button", name="Cancel")
    # The dialog has the focus at once, on its main action.
    expect(confirm).to_be_focused()
    # Tab cycles inside the dialog, both ways, and the polling leaves it alone meanwhile.
    page.keyboard.press("Tab")
    expect(cancel).to_be_focused()
    page.keyboard.press("Tab")
    expect(confirm).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(cancel).to_be_focused()
    page.wait_for_timeout(1200)
    expect(cancel).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(confirm).to_be_focused()
    shot("dialog-confirmation")
    page.keyboard.press("Enter")
    wait_until_finished(page, "succeeded")
    expect(page.locator("#result")).to_have_text("deleted report.txt")
    expect(page.get_by_role("dialog")).to_have_count(0)
    # The focus is on the run's state, not lost with the dialog.
    assert page.evaluate("document.activeElement.id") in ("answer-sent", "live-status")


def test_escape_answers_cancel(page: Page, login, alice, checks, worker) -> None:
    login(alice)
    run_tool(page, checks.slug, "ask_first", Target="notes.txt")
    dialog = page.get_by_role("dialog", name="Sure?")
    expect(dialog).to_be_visible(timeout=RUN_TIMEOUT_MS)
    # Confirm has the focus; Esc must still send "cancel", not the focused button's value.
    expect(dialog.get_by_role("button", name="Confirm")).to_be_focused()
    page.keyboard.press("Escape")
    wait_until_finished(page, "succeeded")
    expect(page.locator("#result")).to_have_text("kept notes.txt")


def test_an_input_is_typed_and_sent_with_enter(page: Page, login, alice, checks, worker) -> None:
    login(alice)
    run_tool(page, checks.slug, "favourite")
    dialog = page.get_by_role("dialog", name="Colour?")
    expect(dialog).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(dialog.get_by_label("Your answer")).to_be_focused()
    page.keyboard.type("amber")
    page.keyboard.press("Enter")
    wait_until_finished(page, "succeeded")
    expect(page.locator("#result")).to_have_text("you like amber")
