"""A tool's `message` Markdown rendered and sanitised on the server, and JSON results as a
collapsible tree: hostile text never becomes markup."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from toolhub.runs.rendering import MAX_TREE_NODES, json_tree, render_markdown


def test_markdown_is_rendered():
    html = render_markdown("**bold**, `code` and a [link](https://example.org)\n\n- one\n- two")
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert '<a href="https://example.org" rel="noopener noreferrer nofollow">link</a>' in html
    assert "<ul>" in html and "<li>one</li>" in html


def test_fenced_code_and_tables_render():
    html = render_markdown("```python\nprint('<hi>')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert "<pre><code" in html and "&lt;hi&gt;" in html and "<hi>" not in html
    assert "<table>" in html and "<td>1</td>" in html


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        '<a href="https://e.org" onclick="alert(1)">x</a>',
        "![tracker](https://tracker.example/pixel.png)",
        "<iframe src=https://e.org></iframe>",
        "<style>body{display:none}</style>",
    ],
)
def test_no_raw_html_script_or_dangerous_link_survives(hostile):
    class Markup(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags: list[tuple[str, list]] = []

        def handle_starttag(self, tag, attrs):
            self.tags.append((tag, attrs))

    markup = Markup()
    markup.feed(render_markdown(hostile))
    for tag, attrs in markup.tags:
        assert tag in {"p", "a", "code"}, tag
        for name, value in attrs:
            assert name in {"href", "rel", "title"}, name
            if name == "href":
                assert value.startswith(("https://", "http://", "mailto:")), value


def test_a_huge_message_is_cut():
    assert len(render_markdown("x" * 1_000_000)) < 200_000


def test_json_tree_escapes_keys_and_values_and_opens_two_levels():
    html = json_tree({"<b>": ["<script>", 1, None, True, {"deep": {"deeper": 1}}]})
    assert "<script>" not in html and "<b>" not in html
    assert "&quot;&lt;b&gt;&quot;" in html and "&quot;&lt;script&gt;&quot;" in html
    assert '<span class="j-num">1</span>' in html and '<span class="j-lit">null</span>' in html
    assert html.count("<details") == 4
    assert html.count('<details class="j-node" open>') == 2
    assert "1 key" in html and "5 items" in html


def test_json_tree_is_bounded_in_size_and_depth():
    wide = json_tree(list(range(MAX_TREE_NODES * 3)))
    assert wide.count("<li>") <= MAX_TREE_NODES + 1 and "…" in wide
    deep: object = 1
    for _ in range(500):
        deep = [deep]
    assert "…" in json_tree(deep)
