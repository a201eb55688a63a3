"""Fixtures for the browser tests: Debian's Chromium driven by Playwright's sync API against
pytest-django's live server.

One browser process serves the whole session (starting Chromium takes about a second); each
test gets a fresh context, so cookies and storage never leak between tests. A failing test
leaves a full-page screenshot in /tmp/toolhub-shots/, named after the test. The pages only
ever talk to the live server: any other request is aborted, so the tests cannot depend on
the internet by accident.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from tests.browser.helpers import EXPECT_TIMEOUT_MS, log_in
from tests.browser.live import in_flight as live_in_flight

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SHOTS = Path(os.environ.get("TOOLHUB_SHOTS_DIR", "/tmp/toolhub-shots"))
# axe-core (vendored by scripts/vendor-js) checks every page a test opens, once it has
# loaded: a serious or critical violation is reported as a console error, which fails the
# test like any script error does. Injected by Playwright, so the pages never ship it.
AXE = Path(__file__).with_name("vendor") / "axe.min.js"
AXE_CHECK = """
window.addEventListener("load", function () {
  if (window.top !== window || !window.axe) { return; }
  window.__axeDone = window.axe.run(document, { resultTypes: ["violations"] }).then(function (result) {
    var bad = result.violations.filter(function (v) { return v.impact === "serious" || v.impact === "critical"; });
    bad.forEach(function (v) {
      var where = v.nodes.slice(0, 3).map(function (n) { return n.target.join(" "); }).join(" | ");
      console.error("axe " + v.impact + " " + v.id + " on " + location.pathname + ": " + v.help + " [" + where + "]");
    });
    return bad.length;
  });
});
"""


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the item so the page fixture can tell, while tearing
    # down, whether the test body failed and a screenshot is worth taking.
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def playwright_driver() -> Iterator[Playwright]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium package (make system does)")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    # Never a downloaded browser: Debian's Chromium, which CI installs with apt.
    chromium = playwright_driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield chromium
    chromium.close()


def _safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1])[:120]


@pytest.fixture
def page(browser: Browser, live_server, request) -> Iterator[Page]:
    """A page in a fresh browser context whose relative URLs go to the live server."""
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    in_flight = live_in_flight(live_server)
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900}, locale="en-GB")
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    allowed = urlsplit(live_server.url).netloc

    def only_live_server(route) -> None:
        url = urlsplit(route.request.url)
        if url.scheme in ("http", "https") and url.netloc != allowed:
            route.abort()
        else:
            route.continue_()

    context.route("**/*", only_live_server)
    context.add_init_script(script=AXE.read_text() + AXE_CHECK)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    # Failed resource loads are left out: pages that answer 4xx on purpose (a form with
    # errors answers 400) log one each.
    tab.on(
        "console",
        lambda msg: errors.append(msg.text)
        if msg.type == "error" and not msg.text.startswith("Failed to load resource")
        else None,
    )
    yield tab
    report = getattr(request.node, "report_call", None)
    if report is not None and report.passed:
        # Let the accessibility check of the last page finish before judging the console.
        try:
            tab.evaluate("window.__axeDone || 0")
        except Exception as exc:  # noqa: BLE001 - a page that is gone has nothing left to check
            print(f"could not wait for axe: {exc}")
    failure_shot = SHOTS / f"FAILED-{_safe_name(request.node.nodeid)}.png"
    if report is not None and report.failed:
        SHOTS.mkdir(parents=True, exist_ok=True)
        try:
            tab.screenshot(path=str(failure_shot), full_page=True)
        except Exception as exc:  # noqa: BLE001 - a broken page must not hide the real failure
            print(f"could not take a screenshot: {exc}")
    else:
        # A screenshot left by an earlier failure of this test would only mislead.
        failure_shot.unlink(missing_ok=True)
    context.close()
    # The database is flushed next: not while the server still answers one of this test's requests.
    if not in_flight.wait_idle(timeout=30):
        print("the live server was still answering a request 30 s after the test ended")
    if report is not None and report.passed:
        # A script error is a bug even when the test's own checks passed.
        assert not errors, "the page reported errors:\n" + "\n".join(errors)


@pytest.fixture
def shot(page: Page) -> Callable[[str], None]:
    """Save a full-page screenshot of the page as it is now, for a person to look at."""

    def _shot(name: str, *, target: Page | None = None) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        (target or page).screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    return _shot


@pytest.fixture
def ready_toolkit(upload, build) -> Callable[..., object]:
    """Upload a source and build it in this process (real lock, environment and sandboxed
    introspection), so its page opens on a ready toolkit. Tests that also need a worker ask
    for this first: the worker, when it starts, drops the build task the upload queued."""
    from toolhub.toolkits.models import Status

    def _ready(user, source: str, slug: str | None = None):
        toolkit = build(upload(user, source, slug=slug))
        revision = toolkit.current_revision
        assert revision.status == Status.READY, f"{revision.status}: {revision.status_detail}\n{revision.traceback}"
        return toolkit

    return _ready


@pytest.fixture
def login(page: Page) -> Callable[..., Page]:
    def _login(user, password: str | None = None) -> Page:
        log_in(page, getattr(user, "username", user), password)
        return page

    return _login
