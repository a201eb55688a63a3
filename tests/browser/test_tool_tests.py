"""Tool tests in a real browser (docs/tool-tests.md), with a worker and the sandbox where a run
happens: the owner turns a playground run into a test with "Save as test", adds another with
the keyboard only, runs them and reads the results; on a 390 px phone the Tests tab, a failed
run's diff and the review page fit the screen, and an admin approves a revision whose tests
failed, giving the reason the page asks for. axe checks every page opened (conftest).
Screenshots (the shot fixture) are kept in docs/screenshots/ (tool-tests.png,
tool-test-run-failed.png, tool-tests-review-phone.png)."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import PHONE, assert_fits_the_screen, run_tool, wait_until_finished
from tests.conftest import toolkit_source
from toolhub.messages import message
from toolhub.toolkits.models import Revision, Status, ToolTest, ToolTestResult, ToolTestRun, ToolTestStatus
from toolhub.toolkits.tool_tests import tool_test_create

pytestmark = [pytest.mark.browser]



def _fits_the_phone(page: Page) -> None:
    page.set_viewport_size(PHONE)
    assert_fits_the_screen(page)


def test_the_owner_saves_tests_and_runs_them_with_the_keyboard(page: Page, login, alice, ready_toolkit, worker, shot) -> None:
    ready_toolkit(alice, toolkit_source("Echo"), slug="echo")
    login(alice)
    run_tool(page, "echo", "echo", Text="hi")
    wait_until_finished(page, "succeeded")
    page.locator("#save-as-test").click()
    expect(page.locator(".messages")).to_contain_text("Test echo 1 saved.")

    # Another test, from the keyboard only.
    page.get_by_label("Name", exact=True).focus()
    page.keyboard.type("shouts back")
    page.keyboard.press("Tab")  # the tool (echo is the only one)
    page.keyboard.press("Tab")
    page.keyboard.press("Control+A")
    page.keyboard.type('{"text": "HEY"}')
    page.keyboard.press("Tab")  # check 1: kind
    page.keyboard.press("ArrowDown")  # contains? no: the first kind, equals
    page.keyboard.press("Tab")  # path
    page.keyboard.press("Tab")  # value
    page.keyboard.type("HEY")
    page.get_by_role("button", name="Save test").focus()
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("Test shouts back saved.")
    assert list(ToolTest.objects.values_list("name", "checks")) == [
        ("echo 1", [{"kind": "equals", "value": "hi"}]), ("shouts back", [{"kind": "equals", "value": "HEY"}])]

    page.get_by_role("button", name="Run tests").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Test run of revision 1")).to_be_visible()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and ToolTestRun.objects.filter(status__in=["queued", "running"]).exists():
        time.sleep(0.2)
    page.reload()
    expect(page.locator("h2 [data-status]")).to_have_attribute("data-status", "passed")
    expect(page.locator(".test-cases tbody tr.case-passed")).to_have_count(2)
    shot("tool-test-run")
    _fits_the_phone(page)
    shot("tool-test-run-phone")
    page.goto("/toolkits/echo/tests/")
    _fits_the_phone(page)
    shot("tool-tests-phone")


def _held(upload, alice) -> tuple[Revision, ToolTestRun]:
    """An owner's revision held because a test failed (as the worker leaves it)."""
    toolkit = upload(alice, toolkit_source("Echo"), slug="echo")
    Revision.objects.filter(pk=toolkit.current_revision_id).update(status=Status.READY, status_detail="")
    toolkit.refresh_from_db()
    test = tool_test_create(toolkit=toolkit, name="says hi", tool="echo", arguments={"text": "hi"},
                            checks=[{"kind": "equals", "value": "hi"}], by=alice)
    from toolhub.toolkits.services import revision_upload

    revision = revision_upload(toolkit=toolkit, source=toolkit_source("Echo", version="0.2.0"), user=alice).revision
    Revision.objects.filter(pk=revision.pk).update(
        status=Status.AWAITING_REVIEW, status_detail="1 of its 1 tests failed (says hi); an admin may still approve it.")
    run = ToolTestRun.objects.create(toolkit=toolkit, revision=revision, gate=True, status=ToolTestStatus.FAILED,
                                     total=1, failed=1, started_by=alice)
    result = ToolTestResult(run=run, test=test, name="says hi", tool="echo", expected="hi", actual="HI <b>")
    result.set_message(message("tests.equals_differs", n=1))
    result.save()
    return Revision.objects.get(pk=revision.pk), run


@pytest.mark.django_db(transaction=True)
def test_on_a_phone_the_owner_reads_why_and_an_admin_approves_with_a_reason(page: Page, login, alice, admin, upload, shot) -> None:
    revision, run = _held(upload, alice)
    login(alice)
    page.goto("/toolkits/echo/tests/")
    shot("tool-tests")
    page.get_by_role("link", name=f"#{run.pk}").click()
    expect(page.locator("pre.diff")).to_contain_text("+HI <b>")
    shot("tool-test-run-failed")
    _fits_the_phone(page)

    login(admin)
    page.goto("/packages/reviews/")
    entry = page.locator(f"#review-{revision.pk}")
    expect(entry).to_contain_text("Its tests: 1 of 1 failed")
    expect(entry.locator(".test-cases pre.diff")).to_contain_text("-hi")
    _fits_the_phone(page)
    shot("tool-tests-review-phone")
    entry.get_by_label("Reason for approving although its tests failed").focus()
    page.keyboard.type("the capitals are intended")
    page.keyboard.press("Tab")
    expect(entry.get_by_role("button", name="Approve")).to_be_focused()
    page.once("dialog", lambda dialog: dialog.accept())
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("Approved revision 2 of echo: it is current now.")
    run.refresh_from_db()
    assert (run.status, run.override_reason, run.overridden_by) == (ToolTestStatus.OVERRIDDEN, "the capitals are intended", admin)
