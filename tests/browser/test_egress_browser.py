"""The journey in a real browser: an admin grants a toolkit network egress on its Overview
tab, runs one of its tools from the Tools tab against a test server, and the run view lists the
host the tool contacted; a destination the proxy refuses is listed with the reason.

A real Celery worker runs the tool in the sandbox and the egress proxy next to it. The server is
the private test network of tests/egress_fixtures.py (a public address that exists only in a
network namespace this test run creates), so nothing reaches the internet; the browser itself
only ever talks to the live server."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import run_tool, wait_until_finished
from tests.egress_fixtures import TestNetwork, test_network_fixture  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.sandbox]

FETCHER = '''"""
title: Status Fetcher
author: ToolHub tests
description: Reads a status page over HTTP.
version: 1.0.0
"""

import urllib.request


class Tools:
    def fetch(self, address: str) -> str:
        """
        Fetch a page and return its text.
        :param address: The URL to fetch
        """
        with urllib.request.urlopen(address, timeout=20) as response:
            return response.read().decode()
'''


# Asked for before `worker`, so the build is over before the worker starts.
@pytest.fixture
def fetcher(alice, ready_toolkit):
    return ready_toolkit(alice, FETCHER)


def test_an_admin_grants_egress_and_the_run_view_lists_the_host_contacted(
    page: Page, login, admin, fetcher, test_network: TestNetwork, worker, shot
) -> None:
    login(admin)
    page.goto(f"/toolkits/{fetcher.slug}/")
    egress = page.locator("section#egress")
    expect(egress).to_contain_text("No network: the toolkit's sandbox cannot reach anything.")
    expect(egress).to_contain_text("This toolkit imports urllib: it will need network egress")

    # Only the test server's address: an allowlist entry may be an IP address, matched literally.
    egress.get_by_label(re.compile(r"^Allowed hosts")).fill(test_network.address)
    egress.get_by_role("button", name="Grant network egress").click()

    expect(page.locator(".messages")).to_contain_text("Network egress granted.")
    egress = page.locator("section#egress")
    expect(egress).to_contain_text("Granted by admin on")
    expect(egress.locator("code", has_text=test_network.address)).to_be_visible()
    expect(egress).not_to_contain_text("it will need network egress")
    shot("egress-granted")

    path = "/status-from-the-browser"
    run_tool(page, fetcher.slug, "fetch", Address=test_network.url(path))
    wait_until_finished(page, "succeeded")

    live = page.locator("#live")
    expect(live.locator("#result")).to_contain_text(f'"path": "{path}"')
    row = live.locator("table.egress-report tr.egress-host")
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(0)).to_have_text(test_network.address)
    expect(row.locator("td").nth(1)).to_have_text(str(test_network.http_port))
    for column in (2, 3):
        expect(row.locator("td").nth(column)).to_have_text(re.compile(r"^[1-9][0-9]*$"))
    shot("egress-run")
    assert path in test_network.paths_seen()

    # The cloud metadata address is outside the allowlist and refused anyway; the run view says why.
    run_tool(page, fetcher.slug, "fetch", Address="http://169.254.169.254/latest/meta-data/")
    wait_until_finished(page, "failed")
    live = page.locator("#live")
    expect(live.locator("#error")).to_contain_text("ToolHub egress refused")
    expect(live.locator("table.egress-report")).to_contain_text("No host was contacted.")
    expect(live.locator("ul.egress-refused li")).to_have_text(
        re.compile(r"^169\.254\.169\.254:80 — 169\.254\.169\.254 is not in this toolkit's allowlist")
    )
    shot("egress-refused")
