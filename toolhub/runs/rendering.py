"""What a run's page shows of a tool's output: `message`/`replace` content as Markdown, and
JSON results as a collapsible tree. Both are built on the server from text the (hostile)
toolkit chose, so every piece is escaped or passes an allowlist sanitiser."""

from __future__ import annotations

import json

import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import ngettext
from markdown_it import MarkdownIt

# A message is at most this much Markdown; the rest is cut (the full text stays stored).
MAX_MARKDOWN_CHARS = 100_000
# A JSON tree shows at most this many values and this depth; beyond, a "…" stands in and the
# JSON text (always on the page too) has everything.
MAX_TREE_NODES = 2_000
MAX_TREE_DEPTH = 12
# Levels of the tree open at first.
OPEN_LEVELS = 2

# CommonMark with raw HTML off: a tool's `<script>` arrives as text. nh3 (ammonia) then
# keeps only these tags and attributes, whatever a renderer bug might let through. No images:
# a page must not load what a tool points at.
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
    ["table", "strikethrough"]
)
_TAGS = {
    "p", "br", "strong", "em", "del", "s", "code", "pre", "blockquote", "ul", "ol", "li", "hr",
    "h1", "h2", "h3", "h4", "h5", "h6", "a", "table", "thead", "tbody", "tr", "th", "td",
}
# No style attributes: the pages' Content-Security-Policy allows no inline styles.
_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}


def render_markdown(text: str) -> SafeString:
    html = _MARKDOWN.render(text[:MAX_MARKDOWN_CHARS])
    clean = nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)  # noqa: S308 - sanitised by nh3 just above


def json_tree(value: object) -> SafeString:
    """A JSON value as nested <details> lists, every key and scalar escaped."""
    budget = [MAX_TREE_NODES]
    return mark_safe("".join(_node(value, 0, budget)))  # noqa: S308 - built from escaped parts


def _scalar(value: object) -> str:
    if isinstance(value, str):
        kind = "str"
    elif isinstance(value, bool) or value is None:
        kind = "lit"
    else:
        kind = "num"
    return f'<span class="j-{kind}">{escape(json.dumps(value, ensure_ascii=False))}</span>'


def _node(value: object, depth: int, budget: list[int]) -> list[str]:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_TREE_DEPTH:
        return ['<span class="j-more">…</span>']
    if not isinstance(value, dict | list):
        return [_scalar(value)]
    items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
    if not items:
        return ['<span class="j-lit">{}</span>' if isinstance(value, dict) else '<span class="j-lit">[]</span>']
    opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
    n = len(items)
    if isinstance(value, dict):
        count = ngettext("%(n)s key", "%(n)s keys", n) % {"n": n}
    else:
        count = ngettext("%(n)s item", "%(n)s items", n) % {"n": n}
    parts = [f'<details class="j-node"{" open" if depth < OPEN_LEVELS else ""}><summary>{opening} <span class="j-count">{escape(count)}</span> {closing}</summary><ul class="j-items">']
    for key, child in items:
        if budget[0] <= 0:
            parts.append('<li><span class="j-more">…</span></li>')
            break
        label = escape(json.dumps(key, ensure_ascii=False)) if isinstance(value, dict) else str(key)
        parts.append(f'<li><span class="j-key">{label}</span>: ')
        parts.extend(_node(child, depth + 1, budget))
        parts.append("</li>")
    parts.append("</ul></details>")
    return parts
