"""The pages work under the strict Content-Security-Policy (script-src 'self'): no inline
script or handler is refused, the language menu still submits, build logs still scroll to
their end."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import example
from toolhub.messages import as_written
from toolhub.toolkits.models import Status

pytestmark = pytest.mark.browser


def _csp_errors(page: Page) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if "Content Security Policy" in message.text else None)
    return errors


def test_the_pages_run_under_the_policy_without_a_refused_script(page: Page, login, alice, upload, shot) -> None:
    errors = _csp_errors(page)
    toolkit = upload(alice, example("string_reverse"))
    revision = toolkit.current_revision
    revision.build_log = "\n".join(f"line {n}" for n in range(400)) + "\nthe build ended"
    revision.set_status(Status.FAILED, as_written("for the test"))
    revision.save()
    login(alice)
    response = page.goto(f"/toolkits/{toolkit.slug}/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.goto(f"/toolkits/{toolkit.slug}/environment/")
    log = page.locator("#build-log")
    expect(log).to_contain_text("the build ended")
    page.wait_for_function("document.getElementById('build-log').scrollTop > 0")
    page.goto(f"/toolkits/{toolkit.slug}/source/")
    page.goto(f"/toolkits/{toolkit.slug}/revisions/")
    page.goto("/account/tokens/")
    # The language menu submits itself (it had an inline onchange handler).
    page.locator("#language-select").select_option("fr")
    expect(page.locator("html")).to_have_attribute("lang", "fr")
    expect(page).to_have_url(re.compile(r"/account/tokens/$"))
    shot("csp-french")
    assert errors == []
