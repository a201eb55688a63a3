"""The journey in a real browser: run tools from the Tools tab and watch them work, with
a real worker running them in the sandbox."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import RUN_TIMEOUT_MS, run_tool, wait_until_finished
from tests.conftest import example

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.sandbox]

# Tools that exercise the live view: one asks for confirmation, one raises, one takes its time.
CHECKS = '''"""
title: Browser Checks
author: ToolHub tests
version: 1.0.0
"""

import asyncio


class Tools:
    async def ask_first(self, target: str, __event_call__=None) -> str:
        """
        Ask before deleting something.
        :param target: What to delete
        """
        answer = await __event_call__(
            {"type": "confirmation", "data": {"title": "Sure?", "message": f"Really delete {target}?"}}
        )
        return f"deleted {target}" if answer else f"kept {target}"

    async def favourite(self, __event_call__=None) -> str:
        """Ask for a favourite colour."""
        colour = await __event_call__(
            {"type": "input", "data": {"title": "Colour?", "message": "Your favourite colour", "placeholder": "blue"}}
        )
        return f"you like {colour}"

    def explode(self, word: str) -> str:
        """
        Fail on purpose.
        :param word: Any word
        """
        raise ValueError(f"cannot handle {word}")

    async def slow(self, __event_emitter__=None) -> str:
        """Report a status, wait three seconds, then answer."""
        await __event_emitter__({"type": "status", "data": {"description": "Working on it", "done": False}})
        await asyncio.sleep(3)
        await __event_emitter__({"type": "status", "data": {"description": "All done", "done": True}})
        return "slow result"
'''


# Tests ask for these before `worker`, so the build is over before the worker starts.
@pytest.fixture
def lookup_toolkit(alice, ready_toolkit):
    return ready_toolkit(alice, example("library_lookup"))


@pytest.fixture
def checks(alice, ready_toolkit):
    return ready_toolkit(alice, CHECKS)


def test_lookup_shows_status_lines_citations_and_the_result(page: Page, login, carol, lookup_toolkit, worker, shot) -> None:
    login(carol)
    page.goto(f"/toolkits/{lookup_toolkit.slug}/tools/?tool=lookup")
    tool = page.locator("#tool-lookup")
    expect(tool.locator("table.params")).to_contain_text("The word to look up")
    shot("tools")
    run_tool(page, lookup_toolkit.slug, "lookup", Word="valve")
    page.evaluate("window.__sameDocument = true")

    wait_until_finished(page, "succeeded")
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded instead of polling"
    live = page.locator("#live")
    expect(live.locator(".status-lines li")).to_have_text(["Looking up 'valve'", "1 found"])
    expect(live.locator(".status-lines li").last).to_have_class("done")
    card = live.locator("article.citation")
    expect(card).to_have_count(1)
    link = card.get_by_role("link", name="Glossary: valve")
    expect(link).to_have_attribute("href", "https://example.org/glossary#valve")
    expect(card.locator("blockquote")).to_have_text(
        "A setting of a toolkit, edited by an admin (Valves) or by each user (UserValves)."
    )
    expect(card.locator("dl.meta")).to_contain_text("source")
    expect(live.locator("#result")).to_have_text("valve: A setting of a toolkit")
    expect(live).to_contain_text(re.compile(r"\d+ ms"))
    shot("invocation-lookup")

    # Back to the Tools tab itself: the run is listed under "Recent runs".
    page.get_by_role("navigation", name="Toolkit").get_by_role("link", name="Tools").click()
    recent = page.locator("table.runs")
    expect(recent.locator("tbody tr")).to_have_count(1)
    expect(recent).to_contain_text("lookup")
    expect(recent.locator(".badge")).to_have_attribute("data-status", "succeeded")


def test_a_confirmation_is_answered_in_the_dialog(page: Page, login, alice, checks, worker, shot) -> None:
    login(alice)
    run_tool(page, checks.slug, "ask_first", Target="report.txt")
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(dialog.get_by_role("heading", name="Sure?")).to_be_visible()
    expect(dialog).to_contain_text("Really delete report.txt?")
    expect(page.locator("#live")).to_have_attribute("data-status", "awaiting_input")
    shot("invocation-confirmation")
    dialog.get_by_role("button", name="Confirm").click()
    wait_until_finished(page, "succeeded")
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page.locator("#result")).to_have_text("deleted report.txt")

    # Cancelling is an answer too, and the tool sees it.
    run_tool(page, checks.slug, "ask_first", Target="notes.txt")
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Really delete notes.txt?", timeout=RUN_TIMEOUT_MS)
    dialog.get_by_role("button", name="Cancel").click()
    wait_until_finished(page, "succeeded")
    expect(page.locator("#result")).to_have_text("kept notes.txt")


def test_an_answer_being_typed_survives_the_polling(page: Page, login, alice, checks, worker) -> None:
    login(alice)
    run_tool(page, checks.slug, "favourite")
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("heading", name="Colour?")).to_be_visible(timeout=RUN_TIMEOUT_MS)
    answer = dialog.get_by_label("Your answer")
    expect(answer).to_have_attribute("placeholder", "blue")
    # Typing takes longer than several polls of the live view (every 500 ms); what is typed
    # must stay, and the field must keep the focus.
    answer.press_sequentially("teal green", delay=150)
    page.wait_for_timeout(1200)
    expect(answer).to_have_value("teal green")
    expect(answer).to_be_focused()
    dialog.get_by_role("button", name="Send").click()
    wait_until_finished(page, "succeeded")
    expect(page.locator("#result")).to_have_text("you like teal green")


def test_an_error_shows_its_traceback_only_to_the_owner(page: Page, login, alice, carol, checks, worker, shot) -> None:
    login(alice)
    run_tool(page, checks.slug, "explode", Word="boom")
    wait_until_finished(page, "failed")
    expect(page.locator("#error")).to_contain_text("cannot handle boom")
    traceback = page.locator("pre.traceback")
    expect(traceback).to_be_visible()
    expect(traceback).to_contain_text('raise ValueError(f"cannot handle {word}")')
    shot("invocation-error-owner")

    login(carol)
    run_tool(page, checks.slug, "explode", Word="bang")
    wait_until_finished(page, "failed")
    expect(page.locator("#error")).to_contain_text("cannot handle bang")
    expect(page.locator("pre.traceback")).to_have_count(0)
    expect(page.get_by_text("Traceback")).to_have_count(0)
    assert "raise ValueError" not in page.content()
    shot("invocation-error-other-user")


def test_a_run_carries_on_when_the_page_is_reloaded(page: Page, login, alice, checks, worker) -> None:
    login(alice)
    run_tool(page, checks.slug, "slow")
    live = page.locator("#live")
    expect(live.locator(".status-lines li")).to_have_text(["Working on it"], timeout=RUN_TIMEOUT_MS)
    url = page.url

    page.reload()
    assert page.url == url
    # Still mid-run after the reload (the tool sleeps for three seconds), and still polled.
    expect(live).to_have_attribute("data-status", "running")
    expect(live.locator(".status-lines li.pending")).to_have_text("Working on it")
    expect(live).to_have_attribute("hx-get", re.compile(r"/live/$"))
    wait_until_finished(page, "succeeded")
    expect(live.locator(".status-lines li")).to_have_text(["Working on it", "All done"])
    expect(live.locator("#result")).to_have_text("slow result")
