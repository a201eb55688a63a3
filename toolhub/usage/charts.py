"""Charts as inline SVG made on the server: no script, readable without colour (every bar
carries its number as text, errors are drawn hatched as well as red, and each chart has a
table of the same figures beside it). Every text is escaped here; the result is safe HTML."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH = 480
BAR_AREA = 150
TOP = 18
BOTTOM = 34
# Above this many bars, only every n-th gets its value and axis label (the table has them all).
LABELLED_BARS = 31

_PATTERN = (
    '<defs><pattern id="{id}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
    '<rect width="6" height="6" fill="#b42318"/><line x1="0" y1="0" x2="0" y2="6" stroke="#fff" stroke-width="2"/></pattern></defs>'
)


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    errors: int = 0


def _svg(*, chart_id: str, title: str, height: int, body: list[str]) -> SafeString:
    return mark_safe(  # noqa: S308 - every text in `body` and `title` is escaped
        f'<svg class="usage-chart" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
        f'aria-labelledby="{chart_id}-title" xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="11">'
        f'<title id="{chart_id}-title">{escape(title)}</title>{_PATTERN.format(id=chart_id + "-hatch")}'
        + "".join(body) + "</svg>"
    )


def column_chart(bars: list[Bar], *, chart_id: str, title: str) -> SafeString:
    """Calls per bucket as columns, each with its errors hatched at its foot."""
    height = TOP + BAR_AREA + BOTTOM
    top = max((bar.value for bar in bars), default=0) or 1
    step = WIDTH / max(len(bars), 1)
    every = max(1, -(-len(bars) // LABELLED_BARS))
    body = [f'<line x1="0" y1="{TOP + BAR_AREA}" x2="{WIDTH}" y2="{TOP + BAR_AREA}" stroke="#6b7280"/>']
    for index, bar in enumerate(bars):
        x = index * step + step * 0.1
        width = max(step * 0.8, 1)
        calls_h = BAR_AREA * bar.value / top
        errors_h = BAR_AREA * bar.errors / top
        base = TOP + BAR_AREA
        body.append(f'<rect x="{x:.1f}" y="{base - calls_h:.1f}" width="{width:.1f}" height="{calls_h:.1f}" fill="#3b5bdb"/>')
        if bar.errors:
            body.append(
                f'<rect x="{x:.1f}" y="{base - errors_h:.1f}" width="{width:.1f}" height="{errors_h:.1f}" fill="url(#{chart_id}-hatch)"/>'
            )
        if index % every == 0:
            middle = x + width / 2
            body.append(f'<text x="{middle:.1f}" y="{base - calls_h - 4:.1f}" text-anchor="middle" fill="#111827">{bar.value}</text>')
            body.append(f'<text x="{middle:.1f}" y="{base + 14}" text-anchor="middle" fill="#374151">{escape(bar.label)}</text>')
    return _svg(chart_id=chart_id, title=title, height=height, body=body)


def row_chart(bars: list[Bar], *, chart_id: str, title: str) -> SafeString:
    """One horizontal bar per group: its name, its calls and, hatched, its errors."""
    row = 22
    height = max(len(bars), 1) * row + 6
    label_width = 150
    area = WIDTH - label_width - 50
    top = max((bar.value for bar in bars), default=0) or 1
    body = []
    for index, bar in enumerate(bars):
        y = index * row + 3
        calls_w = area * bar.value / top
        errors_w = area * bar.errors / top
        name = bar.label if len(bar.label) <= 24 else bar.label[:23] + "…"
        body.append(f'<text x="{label_width - 6}" y="{y + 14}" text-anchor="end" fill="#111827">{escape(name)}</text>')
        body.append(f'<rect x="{label_width}" y="{y}" width="{calls_w:.1f}" height="{row - 6}" fill="#3b5bdb"/>')
        if bar.errors:
            body.append(f'<rect x="{label_width}" y="{y}" width="{errors_w:.1f}" height="{row - 6}" fill="url(#{chart_id}-hatch)"/>')
        body.append(f'<text x="{label_width + calls_w + 6:.1f}" y="{y + 14}" fill="#111827">{bar.value}</text>')
    return _svg(chart_id=chart_id, title=title, height=height, body=body)
