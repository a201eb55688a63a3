"""Connecting an app in one step, as an admin does it in Chromium against a real ToolHub server
(uvicorn, a Celery worker, the sandbox): create a client credential, copy its token, open the
Connect page for it, paste the token, copy the URL and the headers (the clipboard read back),
and use exactly what was copied with the official `mcp` client and with plain HTTP against the
served OpenAPI document (its `servers` entry). At 390 px nothing on the page is wider than the
screen. Screenshots: docs/screenshots/connect-page.png and phone-connect-page.png.

The people: admin creates the credential for Open WebUI; alice owns the toolkit and has her
own city in its UserValves, so a result that names Lyon was run as her."""

from __future__ import annotations

import httpx2 as httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests import serving_fixtures
from tests.browser.conftest import AXE, AXE_CHECK, SHOTS
from tests.browser.helpers import EXPECT_TIMEOUT_MS, PASSWORDS, PHONE, assert_fits_the_screen
from tests.conftest import start_worker
from tests.test_serving_live import PRIVATE, SERVED, _run
from toolhub.accounts.models import ClientCredential
from toolhub.toolkits.valves import store_values

pytestmark = [pytest.mark.browser, pytest.mark.sandbox, pytest.mark.worker, pytest.mark.django_db(transaction=True)]



@pytest.fixture
def server(ready_toolkit, alice, tmp_path, monkeypatch):
    served = ready_toolkit(alice, SERVED, "served")
    ready_toolkit(alice, PRIVATE, "private")
    store_values(toolkit=served, values={"city": "Lyon"}, user=alice)
    # This engineer's port range on the shared machine.
    monkeypatch.setattr(serving_fixtures, "PORTS", range(19000, 19100))
    worker = start_worker(tmp_path, concurrency=1)
    process = serving_fixtures.start_server(tmp_path)
    yield process
    process.kill()
    worker.kill()


@pytest.fixture
def tab(browser: Browser, server):
    """A page on the real server, allowed to read the clipboard, with axe checking each page."""
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900}, locale="en-GB",
                                  permissions=["clipboard-read", "clipboard-write"])
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    context.add_init_script(script=AXE.read_text() + AXE_CHECK)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    yield page
    page.evaluate("window.__axeDone || 0")
    context.close()
    assert not errors, "the page reported errors:\n" + "\n".join(errors)


def _clipboard(page: Page) -> str:
    return page.evaluate("navigator.clipboard.readText()")


def _copy(page: Page, name: str) -> str:
    page.get_by_role("button", name=name).click()
    expect(page.get_by_role("button", name=name)).to_have_text("Copied")
    return _clipboard(page)


def test_create_a_credential_then_connect_real_clients_with_what_the_page_copied(tab: Page, server, admin, alice):
    tab.goto("/accounts/login/")
    tab.get_by_label("Username").fill("admin")
    tab.get_by_label("Password").fill(PASSWORDS["admin"])
    tab.get_by_role("button", name="Log in").click()
    tab.get_by_role("navigation", name="Main").get_by_role("link", name="Clients").click()
    tab.get_by_label("Name", exact=True).fill("Open WebUI production")
    tab.get_by_label("Acts for its users", exact=False).check()
    tab.get_by_role("button", name="Create client").click()
    token = _copy(tab, "Copy the token")
    assert len(token) > 20
    assert token == tab.locator("#new-token").inner_text().strip()

    tab.get_by_role("link", name="Connect an app with it").click()
    expect(tab.get_by_role("heading", name="Connect an app", exact=True)).to_be_visible()
    credential = ClientCredential.objects.get(name="Open WebUI production")
    expect(tab.get_by_label("Credential")).to_have_value(str(credential.pk))
    # The screenshot for docs/ before the token is pasted: it shows the placeholders.
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / "connect-page.png"), full_page=True)
    tab.get_by_label("Token", exact=True).fill(token)
    mcp_url = _copy(tab, "Copy the URL for an MCP client")
    headers_text = _copy(tab, "Copy the headers")
    openapi_url = _copy(tab, "Copy the OpenAPI URL")
    mcpo = _copy(tab, "Copy the mcpo command")
    assert mcp_url == f"{server.url}/mcp" and openapi_url == f"{server.url}/openapi"
    assert f"Bearer {token}" in mcpo and "--with 'mcp<2'" in mcpo
    headers = dict(line.split(": ", 1) for line in headers_text.splitlines())
    assert headers["Authorization"] == f"Bearer {token}"
    assert headers["X-OpenWebUI-User-Email"] == "<the person's email>"
    # What Open WebUI sends for the person chatting.
    headers["X-OpenWebUI-User-Email"] = "alice@example.org"

    # The official MCP client with the copied URL and headers: as alice, with her settings.
    async def with_mcp():
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        http = httpx.AsyncClient(headers=headers, timeout=60)
        async with http, Client(streamable_http_client(mcp_url, http_client=http)) as client:
            names = sorted(t.name for t in (await client.list_tools()).tools)
            return names, await client.call_tool("served__greet", {"name": "Ann"})

    names, result = _run(with_mcp())
    assert "served__greet" in names and not result.is_error
    assert result.content[0].text == "Hello Ann from Lyon!"

    # A generic OpenAPI client: the document under the copied URL, then `servers` + the path.
    document = httpx.get(f"{openapi_url}/openapi.json", headers=headers, timeout=60).json()
    base = document["servers"][0]["url"]
    assert base == openapi_url
    assert "/served__greet" in document["paths"]
    answer = httpx.post(f"{base}/served__greet", headers=headers, json={"name": "Bo"}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json() == "Hello Bo from Lyon!"

    # On a phone, nothing is wider than the screen and the Copy buttons are on it.
    tab.set_viewport_size(PHONE)
    tab.reload()
    tab.get_by_label("Token", exact=True).fill("")
    assert_fits_the_screen(tab)
    for button in tab.get_by_role("button", name="Copy", exact=False).all():
        box = button.bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE["width"], box
    tab.screenshot(path=str(SHOTS / "phone-connect-page.png"), full_page=True)


def test_the_toolkit_connect_tab_fits_a_phone(tab: Page, server, alice):
    tab.set_viewport_size(PHONE)
    tab.goto("/accounts/login/")
    tab.get_by_label("Username").fill("alice")
    tab.get_by_label("Password").fill(PASSWORDS["alice"])
    tab.get_by_role("button", name="Log in").click()
    expect(tab.get_by_role("heading", name="Toolkits", exact=True)).to_be_visible()
    tab.goto("/toolkits/served/connect/")
    expect(tab.locator("#c-mcpo")).to_contain_text("mcp<2")
    assert_fits_the_screen(tab)
    copy = tab.locator("button[data-copy='c-mcpo']")
    box = copy.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
    tab.goto("/toolkits/served/tools/")
    assert_fits_the_screen(tab)
