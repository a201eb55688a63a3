"""The code editor in a real browser: write a toolkit with a syntax error, see it in the
gutter on demand without saving, fix it, save; edit a toolkit as a new revision; Tab indents;
a failed file upload keeps its text; the Source tab is highlighted."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import EXAMPLES, toolkit_source
from toolhub.toolkits.models import Revision, Toolkit

pytestmark = pytest.mark.browser

# A dangling `+` on line 8.
BROKEN = '''"""
title: Typed Tools
"""


class Tools:
    def greet(self, name: str) -> str:
        return "hello " + name +
'''


def _editor(page: Page):
    return page.locator(".editor .cm-content")


def _set_text(page: Page, text: str) -> None:
    """Replace the editor's text the way a paste does."""
    editor = _editor(page)
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)


def test_an_author_writes_a_toolkit_sees_the_error_in_the_gutter_fixes_it_and_saves(page: Page, login, alice, shot) -> None:
    login(alice)
    page.goto("/toolkits/new/")
    editor = page.get_by_role("textbox", name="…or paste the source")
    expect(editor).to_be_visible()
    # The textarea the form submits is hidden behind the editor.
    expect(page.locator("#id_source")).to_be_hidden()
    _set_text(page, BROKEN)
    expect(page.locator("#id_source")).to_have_value(BROKEN)

    page.get_by_role("button", name="Check", exact=True).click()
    expect(page.locator("#check-result")).to_have_text("1 problem; see the marked lines.")
    # One error marker in the lint gutter, on line 8.
    markers = page.locator(".cm-gutter-lint .cm-gutterElement:has(.cm-lint-marker-error)")
    expect(markers).to_have_count(1)
    line_numbers = page.locator(".cm-lineNumbers .cm-gutterElement")
    marker_box = markers.first.bounding_box()
    line8_box = line_numbers.filter(has_text=re.compile(r"^8$")).bounding_box()
    assert marker_box and line8_box and abs(marker_box["y"] - line8_box["y"]) < 2
    expect(page.locator(".cm-lintRange-error")).to_have_count(1)
    shot("editor-syntax-error")
    # Checking stored nothing.
    assert not Toolkit.objects.exists()

    # Fix line 8 by typing at its end; the marker goes away with the next check.
    page.locator(".cm-line").nth(7).click()
    page.keyboard.press("End")
    page.keyboard.type(' "!"')
    page.get_by_role("button", name="Check", exact=True).click()
    expect(page.locator("#check-result")).to_have_text("No problems found.")
    expect(markers).to_have_count(0)
    assert not Toolkit.objects.exists()

    page.get_by_role("button", name="Check and upload").click()
    expect(page).to_have_url(re.compile(r"/toolkits/typed_tools/$"))
    expect(page.locator(".messages")).to_contain_text("Toolkit uploaded as revision 1.")
    assert 'return "hello " + name + "!"' in Toolkit.objects.get().current_revision.source


def test_tab_indents_in_the_editor_and_does_not_leave_it(page: Page, login, alice) -> None:
    login(alice)
    page.goto("/toolkits/new/")
    _editor(page).click()
    page.keyboard.type("x = 1")
    page.keyboard.press("Home")
    page.keyboard.press("Tab")
    expect(page.locator("#id_source")).to_have_value("    x = 1")
    assert page.evaluate("document.activeElement.classList.contains('cm-content')")
    # A space after the Tab is typed into the code, not a press of "Check and upload".
    page.keyboard.press("Space")
    expect(page.locator("#id_source")).to_have_value("     x = 1")
    assert not Toolkit.objects.exists()
    # Esc then Tab leaves the editor for the next control.
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Check", exact=True)).to_be_focused()


def test_the_owner_edits_a_toolkit_in_the_browser_as_a_new_revision(page: Page, login, alice, upload, shot) -> None:
    toolkit = upload(alice, toolkit_source("Edited Tools"))
    login(alice)
    page.goto(f"/toolkits/{toolkit.slug}/")
    page.get_by_role("link", name="Edit", exact=True).click()
    expect(page.get_by_role("heading", name="Edit the source")).to_be_visible()
    expect(page.locator(".cm-content")).to_contain_text("title: Edited Tools")
    # Python is highlighted: the `class` keyword carries a highlighting class of its own.
    expect(page.locator(".cm-line", has_text="class Tools:").locator("span").first).to_have_text("class")
    expect(page.locator(".cm-lineNumbers .cm-gutterElement", has_text=re.compile(r"^3$"))).to_be_visible()

    page.locator(".cm-line", has_text="version: 0.1.0").click()
    page.keyboard.press("End")
    page.keyboard.press("Backspace")
    page.keyboard.type("2")
    shot("editor")
    page.get_by_role("button", name="Check", exact=True).click()
    expect(page.locator("#check-result")).to_have_text("No problems found.")
    page.get_by_role("button", name="Check and save as a new revision").click()
    expect(page).to_have_url(re.compile(rf"/toolkits/{toolkit.slug}/revisions/$"))
    expect(page.locator(".messages")).to_contain_text("Uploaded revision 2.")
    latest = Revision.objects.filter(toolkit=toolkit).order_by("-number").first()
    assert (latest.number, latest.version) == (2, "0.1.2")


def test_a_failed_file_upload_keeps_its_text_in_the_editor_with_the_error_marked(page: Page, login, alice, tmp_path) -> None:
    path = tmp_path / "typed_tools.py"
    path.write_text(BROKEN)
    login(alice)
    page.goto("/toolkits/new/")
    page.get_by_label("Python file").set_input_files(path)
    expect(page.locator(".cm-content")).to_contain_text("title: Typed Tools")
    page.get_by_role("button", name="Check and upload").click()
    expect(page.get_by_role("alert")).to_contain_text("nothing was stored")
    # The page that answered still holds the file's text, with the error in the gutter.
    expect(page.locator("#id_source")).to_have_value(BROKEN)
    expect(page.locator(".cm-content")).to_contain_text('return "hello " + name +')
    expect(page.locator(".cm-gutter-lint .cm-lint-marker-error")).to_have_count(1)
    assert not Toolkit.objects.exists()


def test_the_source_tab_is_highlighted(page: Page, login, alice, upload) -> None:
    toolkit = upload(alice, (EXAMPLES / "string_reverse.py").read_text())
    login(alice)
    page.goto(f"/toolkits/{toolkit.slug}/source/")
    keyword = page.locator(".source .k").first
    expect(keyword).to_be_visible()
    # Pygments' default style colours keywords green (#008000); unstyled text is not.
    color = keyword.evaluate("el => getComputedStyle(el).color")
    assert color == "rgb(0, 128, 0)", color
