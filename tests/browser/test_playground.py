"""The Tools tab as a playground, with a real worker and sandbox: find a tool, run it beside
its form without leaving the page, watch the status and the elapsed time, read the Markdown
message, open the JSON result, copy it, and come back to the run by its deep link."""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import RUN_TIMEOUT_MS, run_tool, wait_until_finished

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.sandbox]

PLAY = '''"""
title: Playground Checks
author: ToolHub tests
version: 1.0.0
"""

import asyncio


class Tools:
    async def report(self, topic: str, __event_emitter__=None) -> dict:
        """
        Write a short report as Markdown, slowly, and return its figures.
        :param topic: What the report is about
        """
        await __event_emitter__({"type": "status", "data": {"description": "Collecting", "done": False}})
        await __event_emitter__({"type": "message", "data": {"content": f"**{topic}** is `fine`\\n\\n<script>alert(1)</script>"}})
        await asyncio.sleep(2.5)
        await __event_emitter__({"type": "status", "data": {"description": "Written", "done": True}})
        return {"topic": topic, "figures": [3, 1, 4], "nested": {"ok": True}}

    async def linger(self, __event_emitter__=None) -> str:
        """Take 28 seconds (the sandbox allows 30), unless cancelled."""
        await __event_emitter__({"type": "status", "data": {"description": "Lingering", "done": False}})
        await asyncio.sleep(28)
        return "lingered"

    def ping(self) -> str:
        """Answer pong."""
        return "pong"

    def shout(self, text: str) -> str:
        """
        Upper-case the text.
        :param text: Any text
        """
        return text.upper()
'''


@pytest.fixture
def play(alice, ready_toolkit):
    return ready_toolkit(alice, PLAY)


def test_a_tool_runs_beside_its_form_with_markdown_a_timer_and_a_copyable_json_result(page: Page, login, alice, play, worker, shot) -> None:
    login(alice)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"/toolkits/{play.slug}/tools/")
    # The list filters as one types.
    search = page.get_by_label("Search tools")
    entries = page.locator("#tool-entries li:visible")
    expect(entries).to_have_count(4)
    search.fill("upper")
    expect(entries).to_have_count(1)
    expect(entries).to_contain_text("shout")
    search.fill("rep")
    expect(entries).to_have_count(1)
    page.get_by_role("link", name="report").click()
    expect(page).to_have_url(re.compile(r"\?tool=report$"))
    expect(page.locator("#tool-report")).to_be_visible()
    expect(page.locator("#tool-shout")).to_have_count(0)
    page.evaluate("window.__sameDocument = true")

    form = page.locator("#tool-report form.run-form")
    form.get_by_label("Topic").fill("Coverage")
    form.get_by_role("button", name="Run").click()
    # The run comes in beside the form; the address becomes its deep link.
    expect(page).to_have_url(re.compile(rf"/toolkits/{play.slug}/tools/\?tool=report&run=[0-9a-f-]{{36}}$"))
    live = page.locator("#run-panel #live")
    expect(live.locator("#status-current")).to_have_text("Collecting", timeout=RUN_TIMEOUT_MS)
    expect(live.locator("#status-current")).to_have_class(re.compile(r"\bpending\b"))
    clock = live.locator("#elapsed")
    expect(clock).to_have_text(re.compile(r"^\d+\.\d s$"))
    first = float(clock.inner_text().split()[0])
    page.wait_for_timeout(700)
    assert float(clock.inner_text().split()[0]) > first
    # Markdown, rendered on the server; the tool's <script> is text.
    message = live.locator("#message")
    expect(message.locator("strong")).to_have_text("Coverage")
    expect(message.locator("code")).to_have_text("fine")
    expect(message).to_contain_text("<script>alert(1)</script>")
    expect(page.locator("#tool-report form.run-form")).to_be_visible()
    shot("playground-mid-run")

    wait_until_finished(page, "succeeded")
    assert page.evaluate("window.__sameDocument") is True, "the page was left or reloaded"
    expect(live.locator("#status-current")).to_have_text("Written")
    expect(live.locator("#elapsed")).to_have_count(0)
    # The status history is one click away, and none of it is left pending.
    live.locator("#status-history summary").click()
    expect(live.locator(".status-lines li")).to_have_text(["Collecting", "Written"])
    expect(live.locator(".status-lines li.pending")).to_have_count(0)
    # The JSON result as a tree whose branches open and close.
    tree = live.locator("#result-tree")
    expect(tree).to_contain_text('"figures"')
    nested = tree.locator("details.j-node").nth(2)
    expect(nested).to_contain_text('"ok"')
    expect(nested.locator(".j-items")).to_be_visible()
    nested.locator("summary").click()
    expect(nested.locator(".j-items")).to_be_hidden()
    nested.locator("summary").click()
    expect(nested.locator(".j-items")).to_be_visible()
    expect(nested).to_contain_text("true")
    shot("playground-result")

    live.locator(".block-head", has_text="Result").get_by_role("button", name="Copy").click()
    expect(live.locator(".block-head", has_text="Result").get_by_role("button", name="Copied")).to_be_visible()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert json.loads(copied) == {"topic": "Coverage", "figures": [3, 1, 4], "nested": {"ok": True}}

    # The deep link brings the same run back beside its tool.
    url = page.url
    page.goto(url)
    expect(page.locator("#run-panel #live")).to_have_attribute("data-status", "succeeded")
    expect(page.locator("#tool-report")).to_be_visible()
    expect(page.get_by_label("Topic")).to_have_value("Coverage")


def test_refused_input_shows_its_error_in_place(page: Page, login, alice, play, worker) -> None:
    login(alice)
    page.goto(f"/toolkits/{play.slug}/tools/?tool=shout")
    page.evaluate("window.__sameDocument = true")
    page.locator("#tool-shout form.run-form").get_by_role("button", name="Run").click()
    expect(page.locator("#tool-shout .errorlist, #tool-shout .error").first).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True
    page.locator("#tool-shout form.run-form").get_by_label("Text").fill("hey")
    page.locator("#tool-shout form.run-form").get_by_role("button", name="Run").click()
    wait_until_finished(page, "succeeded")
    expect(page.locator("#result")).to_have_text("HEY")


def test_a_long_run_is_cancelled_and_its_sandbox_stopped(page: Page, login, alice, play, worker, shot) -> None:
    from toolhub.runs.models import Invocation

    login(alice)
    run_tool(page, play.slug, "linger")
    live = page.locator("#run-panel #live")
    expect(live.locator("#status-current")).to_have_text("Lingering", timeout=RUN_TIMEOUT_MS)
    cancelled_at = time.monotonic()
    live.get_by_role("button", name="Cancel run").click()
    wait_until_finished(page, "failed")
    expect(page.locator("#error")).to_have_text("Cancelled by alice.")
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
    shot("playground-cancelled")
    # The worker (one process) is free again at once: the sandbox was stopped rather than
    # left to sleep out its 28 seconds.
    run_tool(page, play.slug, "ping")
    wait_until_finished(page, "succeeded")
    assert time.monotonic() - cancelled_at < 20
    linger = Invocation.objects.get(tool="linger")
    assert linger.error == "Cancelled by alice." and linger.result is None
