"""The journey in a real browser: upload a toolkit, see its manifest, see a syntax error
at its line, upload a second revision, compare the two, roll back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import EXAMPLES
from toolhub.toolkits.models import Toolkit

pytestmark = pytest.mark.browser

# A syntax error on line 8 (a dangling `+`), with enough lines around it to show the listing.
BROKEN = '''"""
title: Broken Tools
"""


class Tools:
    def greet(self, name: str) -> str:
        return "hello " + name +

    def other(self) -> str:
        return "x"
'''


def _second_revision(tmp_path: Path) -> Path:
    """string_reverse with a new version and one changed line, as a file to upload."""
    source = (EXAMPLES / "string_reverse.py").read_text()
    changed = source.replace("\nversion: 0.4.0", "\nversion: 0.5.0").replace(
        'return "Wrong API key"', 'return "Wrong API key, ask an admin"'
    )
    assert changed != source
    path = tmp_path / "string_reverse.py"
    path.write_text(changed)
    return path


def test_an_author_uploads_a_file_and_sees_the_manifest(page: Page, login, alice, shot) -> None:
    login(alice)
    page.get_by_role("link", name="New toolkit").click()
    expect(page.get_by_role("heading", name="New toolkit")).to_be_visible()
    page.get_by_label("Python file").set_input_files(EXAMPLES / "string_reverse.py")
    page.get_by_role("button", name="Check and upload").click()

    expect(page).to_have_url(re.compile(r"/toolkits/string_inverse/$"))
    expect(page.locator(".messages")).to_contain_text("Toolkit uploaded as revision 1.")
    expect(page.get_by_role("link", name="Overview")).to_have_attribute("aria-current", "page")
    manifest = page.locator("table.manifest")
    for key, value in [("title", "String Inverse"), ("author", "Your Name"), ("version", "0.4.0"), ("license", "MIT")]:
        expect(manifest.locator("tr", has=page.locator(f"th:text-is('{key}')")).locator("td")).to_have_text(value)
    expect(manifest.get_by_role("link", name="https://website.com")).to_have_attribute("href", "https://website.com")
    expect(page.locator("h1")).to_contain_text("String Inverse")
    expect(page.get_by_text("reverse_string", exact=True)).to_be_visible()
    shot("overview")

    page.get_by_role("link", name="Toolkits", exact=True).first.click()
    expect(page.get_by_role("link", name="String Inverse")).to_be_visible()
    shot("toolkit-list")


def test_a_syntax_error_is_shown_at_its_line_and_nothing_is_stored(page: Page, login, alice, shot) -> None:
    login(alice)
    page.goto("/toolkits/new/")
    # The paste box is a code editor; the text goes in as a paste does.
    page.get_by_role("textbox", name="…or paste the source").click()
    page.keyboard.insert_text(BROKEN)
    page.get_by_role("button", name="Check and upload").click()

    errors = page.get_by_role("alert")
    expect(errors).to_contain_text("nothing was stored")
    expect(errors.locator(".source-error")).to_have_count(1)
    expect(errors.locator(".source-error")).to_contain_text("Line 8, column 33")
    # The listing marks the offending line, and only that one, with the message under it.
    expect(page.locator("table.listing tr.has-error")).to_have_count(1)
    row = page.locator("#src-8")
    expect(row).to_have_class(re.compile(r"\bhas-error\b"))
    expect(row.locator("th")).to_have_text("8")
    expect(row.locator("pre")).to_have_text('        return "hello " + name +')
    expect(row.locator(".inline-error")).to_contain_text("invalid syntax")
    # The link in the error list jumps to that row.
    errors.locator(".source-error a").click()
    expect(page).to_have_url(re.compile(r"#src-8$"))
    # The pasted source is kept in the form so the author can fix it.
    expect(page.locator("#id_source")).to_have_value(BROKEN)
    expect(page.get_by_role("textbox", name="…or paste the source")).to_contain_text('return "hello " + name +')
    shot("new-toolkit-syntax-error")
    assert not Toolkit.objects.exists()


def test_a_second_revision_can_be_compared_and_rolled_back(page: Page, login, alice, upload, tmp_path, shot) -> None:
    upload(alice, (EXAMPLES / "string_reverse.py").read_text())
    login(alice)
    page.get_by_role("link", name="String Inverse").click()
    page.get_by_role("link", name="Upload new revision").click()
    page.get_by_label("Python file").set_input_files(_second_revision(tmp_path))
    page.get_by_role("button", name="Check and upload").click()

    expect(page).to_have_url(re.compile(r"/toolkits/string_inverse/revisions/$"))
    expect(page.locator(".messages")).to_contain_text("Uploaded revision 2.")
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(2)
    # Revision 1 was never built (no worker here), so the new revision became current.
    expect(rows.nth(0)).to_contain_text("#2")
    expect(rows.nth(0).locator(".tag")).to_have_text("current")
    expect(page.locator(".heading .muted")).to_contain_text("revision 2 · v0.5.0")
    shot("revisions")

    # The form preselects the older revision as "from" and the newer as "to".
    page.get_by_role("button", name="Show diff").click()
    expect(page.get_by_role("heading", name="Changes from revision 1 to 2")).to_be_visible()
    diff = page.locator("pre.diff")
    expect(diff.locator(".d-del")).to_have_text(["-version: 0.4.0", '-            return "Wrong API key"'])
    expect(diff.locator(".d-add")).to_have_text(["+version: 0.5.0", '+            return "Wrong API key, ask an admin"'])
    shot("diff")

    page.get_by_role("link", name="Back to revisions").click()
    expect(page).to_have_url(re.compile(r"/toolkits/string_inverse/revisions/$"))
    # The confirmation is asked by the page's script: a click before it ran submits at once
    # (CI clicked into that gap once).
    page.wait_for_load_state("load")
    rollback = rows.nth(1).get_by_role("button", name="Roll back to this")
    # Dismissing the confirmation changes nothing.
    page.once("dialog", lambda dialog: dialog.dismiss())
    rollback.click()
    expect(rows.nth(0).locator(".tag")).to_have_text("current")
    assert Toolkit.objects.get().current_revision.number == 2

    asked: list[str] = []

    def accept(dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    rollback.click()
    expect(page.locator(".messages")).to_contain_text("Revision 1 is current again.")
    assert asked == ["Make this revision current again?"]
    expect(rows.nth(1).locator(".tag")).to_have_text("current")
    expect(rows.nth(0).locator(".tag")).to_have_count(0)
    expect(page.locator(".heading .muted")).to_contain_text("revision 1 · v0.4.0")
    page.get_by_role("link", name="Source").click()
    expect(page.locator(".source-wrap")).to_contain_text('return "Wrong API key"')
    expect(page.locator(".source-wrap")).not_to_contain_text("ask an admin")
    shot("source")
    assert Toolkit.objects.get().current_revision.number == 1
