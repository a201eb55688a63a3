"""The live build log in a real browser: while a build runs, the Environment tab polls every
second and swaps in the log again. A reader who scrolled up keeps their place; one at the
bottom follows the new lines."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import toolkit_source
from toolhub.toolkits.models import Revision, Status

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCROLL = "document.querySelector('#build-log').scrollTop"
AT_BOTTOM = "(() => { const l = document.querySelector('#build-log'); return l.scrollHeight - l.scrollTop - l.clientHeight < 4; })()"


def _lines(start: int, count: int) -> str:
    return "\n".join(f"step {n}: collecting something" for n in range(start, start + count))


def test_the_build_log_stays_where_the_reader_scrolled(page: Page, login, alice, upload) -> None:
    toolkit = upload(alice, toolkit_source("Slow build"), slug="slow_build")
    revision = toolkit.latest_revision()
    Revision.objects.filter(pk=revision.pk).update(status=Status.BUILDING, build_log=_lines(1, 300))
    login(alice)
    page.goto(f"/toolkits/{toolkit.slug}/environment/")
    log = page.locator("#build-log")
    expect(log).to_contain_text("step 300:")
    # It opens on the newest lines.
    assert page.evaluate(AT_BOTTOM)

    # The reader scrolls up to read an earlier line; new lines arrive with the next polls.
    page.evaluate("document.querySelector('#build-log').scrollTop = 120")
    Revision.objects.filter(pk=revision.pk).update(build_log=_lines(1, 400))
    expect(log).to_contain_text("step 400:")
    page.wait_for_timeout(1500)  # one more poll, which must not move the log either
    assert page.evaluate(SCROLL) == 120
    assert not page.evaluate(AT_BOTTOM)

    # Back at the bottom, the log follows the build again.
    page.evaluate("const l = document.querySelector('#build-log'); l.scrollTop = l.scrollHeight")
    Revision.objects.filter(pk=revision.pk).update(build_log=_lines(1, 500))
    expect(log).to_contain_text("step 500:")
    page.wait_for_function(AT_BOTTOM)
