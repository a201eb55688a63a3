"""The README and the pages in docs/ hold together: every relative link (and its anchor) leads
to a file and a heading that exist, the README stays short, and the toolkit it walks through is
one ToolHub accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolhub.toolkits.source_checks import parse_toolkit_source

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, where links and headings are."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in _prose(path.read_text()):
        match = _HEADING.match(line)
        if not match:
            continue
        text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", match.group(2)).lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _broken_links(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for line in _prose(page.read_text()):
        for target in _LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            linked = (page.parent / path_part).resolve() if path_part else page
            if not linked.exists():
                broken.append(f"{target}: no such file")
            elif not linked.is_relative_to(root):
                broken.append(f"{target}: outside the repository")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_of_a_page_resolves(page: Path) -> None:
    assert _broken_links(page) == []


def test_the_link_check_sees_a_missing_file_a_missing_heading_and_a_path_outside(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "spec.md").write_text("# Outside\n")
    (root / "b.md").write_text("# The B page\n\n## Setting things up\n")
    page = root / "a.md"
    page.write_text(
        "[ok](b.md) [ok too](b.md#setting-things-up) [web](https://example.org/x)\n"
        "[gone](c.md) [no heading](b.md#nothing-here) [own](#a-heading) [spec](../spec.md)\n"
        "```\n[in code](d.md)\n```\n"
        "`[in a code span](e.md)`\n"
        "# A heading\n"
    )
    assert _broken_links(page, root) == [
        "c.md: no such file", "b.md#nothing-here: no such heading", "../spec.md: outside the repository",
    ]
    assert _anchors(root / "b.md") == {"the-b-page", "setting-things-up"}


def test_anchors_follow_githubs_rules(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("## What `make run` does\n## Limits, per user\n## Limits, per user\n")
    assert _anchors(page) == {"what-make-run-does", "limits-per-user", "limits-per-user-1"}


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_bytes()) < 25 * 1024


def test_the_readmes_toolkit_is_accepted_as_it_stands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S)
    assert block is not None
    source = "\n".join(line.removeprefix("   ") for line in block.group(1).splitlines()) + "\n"
    parsed = parse_toolkit_source(source)
    assert parsed.manifest["title"] == "Word Count"
    assert [requirement.name for requirement in parsed.requirements] == ["humanize"]
    assert parsed.tool_names == ["count_words"]
