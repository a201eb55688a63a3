"""Picking a tool in the playground swaps its form in without loading the page, and the
keyboard lands on its first field, not back at the top of the page (it took 29 Tabs); the
address follows, so the link still opens the same tool. No worker: nothing runs here."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.helpers import ready_string_reverse

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TOOLS = [
    {"type": "function", "function": {"name": "ping", "description": "Answers pong.",
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "reverse_string", "description": "Reverses the input string.",
                                      "parameters": {"type": "object", "properties": {"string": {"type": "string"}},
                                                     "required": ["string"]}}},
]


def test_picking_a_tool_keeps_the_page_and_focuses_its_first_field(page: Page, login, alice, upload) -> None:
    toolkit = ready_string_reverse(upload, alice, tools=TOOLS)
    login(alice)
    page.goto(f"/toolkits/{toolkit.slug}/tools/")
    page.evaluate("window.__samePage = true")
    entries = page.get_by_role("navigation", name="Tools of this toolkit")
    entries.get_by_role("link", name="reverse_string").click()
    expect(page).to_have_url(re.compile(r"\?tool=reverse_string$"))
    expect(page.locator("#id_reverse_string__string")).to_be_focused()
    expect(entries.get_by_role("link", name="reverse_string")).to_have_attribute("aria-current", "true")
    expect(entries.locator("a[aria-current]")).to_have_count(1)
    assert page.evaluate("window.__samePage") is True, "the page was reloaded"

    # A tool without parameters: the focus is on its Run button.
    entries.get_by_role("link", name="ping").click()
    expect(page.locator("#tool-ping").get_by_role("button", name="Run")).to_be_focused()
    assert page.evaluate("window.__samePage") is True
    # The address opens the same tool on its own.
    page.reload()
    expect(page.locator("#tool-ping form.run-form")).to_be_visible()
