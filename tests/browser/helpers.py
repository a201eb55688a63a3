"""Helpers for the browser tests: what a person does on the pages, in one place."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

# How long an expectation waits by default. Pages here answer in milliseconds; the generous
# limit only matters on a loaded CI machine.
EXPECT_TIMEOUT_MS = 10_000
# A sandboxed run starts a Python process; on a loaded CI machine that can take a while.
RUN_TIMEOUT_MS = 30_000
# The password each user in tests/conftest.py was created with.
PASSWORDS = {"admin": "pw-admin-1", "alice": "pw-alice-1", "bob": "pw-bob-1", "carol": "pw-carol-1"}
# A phone's screen, in CSS pixels.
PHONE = {"width": 390, "height": 844}


def wait_for_page_checks(page: Page) -> None:
    """Wait until the page has loaded and axe (tests/browser/conftest.py) has checked it. axe
    runs in the page's own thread and works on the page while it does; keys pressed meanwhile
    could reach a page in the middle of it."""
    page.wait_for_load_state("load")
    page.wait_for_function("() => window.__axeDone !== undefined")
    page.evaluate("window.__axeDone")


def assert_fits_the_screen(page: Page) -> None:
    """The page never scrolls sideways: wide content (tables, source, logs, commands) scrolls or
    wraps inside its own box. Measured once the page has loaded: a check made as soon as a
    heading shows may run before the stylesheet applies on a busy machine, and an unstyled
    page is wider."""
    page.wait_for_load_state("load")
    styled = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--fg')")
    assert styled, f"{page.url}: the stylesheet did not load"
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{page.url} is {overflow}px wider than the screen"


def log_in(page: Page, username: str, password: str | None = None) -> None:
    """Log in through the login form, the way a person does, and land on the toolkit list."""
    page.context.clear_cookies()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password or PASSWORDS[username])
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Toolkits", exact=True)).to_be_visible()
    expect(page.locator(".topbar .who")).to_contain_text(username)


def run_tool(page: Page, slug: str, tool: str, **fields: str) -> None:
    """Open the tool in the playground, fill its form by its labels and press Run: the run
    shows beside the form, and the address becomes the run's deep link."""
    page.goto(f"/toolkits/{slug}/tools/?tool={tool}")
    form = page.locator(f"#tool-{tool} form.run-form")
    for label, value in fields.items():
        form.get_by_label(label).fill(value)
    form.get_by_role("button", name="Run").click()
    expect(page).to_have_url(re.compile(rf"/toolkits/{slug}/tools/\?tool={tool}&run=[0-9a-f-]{{36}}$"))
    expect(page.locator("#run-panel #live")).to_have_count(1)


def wait_until_finished(page: Page, status: str) -> None:
    expect(page.locator("#live")).to_have_attribute("data-status", status, timeout=RUN_TIMEOUT_MS)
