"""The Usage page (admins): calls, errors and durations over a range, grouped, with the
busiest and the most failing tools, and the same figures as CSV."""

from __future__ import annotations

import csv

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from toolhub.accounts.roles import admin_required
from toolhub.runs.models import Surface
from toolhub.usage import charts, selectors
from toolhub.usage.forms import GROUP_CHOICES, UsageForm


def _group_label(group: str, label: str) -> str:
    if group == "surface":
        return str(dict(Surface.choices).get(label, label))
    if group in ("client", "user") and not label:
        return _("(none)") if group == "client" else _("(deleted)")
    return label


def _bucket_label(start, bucket: str) -> str:
    return start.strftime("%H:%M") if bucket == "hour" else start.strftime("%m-%d")


@login_required
@admin_required
@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    form = UsageForm(request.GET or {"range": "7d", "group": "tool"})
    if not form.is_valid():
        return render(request, "usage/page.html", {"form": form}, status=400)
    data = form.cleaned_data
    span, group = data["span"], data["group"]
    series, truncated = selectors.usage_series(group_by=group, span=span)
    for entry in series:
        entry.label = _group_label(group, entry.label)
    total, per_bucket = selectors.usage_totals(span=span)
    timeline = [(start, per_bucket.get(start, selectors.Figures())) for start in span.starts()]
    if request.GET.get("format") == "csv":
        return _csv(group, span, series, timeline)
    ctx = {
        "form": form, "span": span, "group": group, "series": series, "truncated": truncated, "total": total,
        "group_label": dict(GROUP_CHOICES)[group], "timeline": timeline, "max_keys": selectors.MAX_KEYS,
        "busiest": selectors.usage_top_tools(span=span, by="calls"),
        "failing": selectors.usage_top_tools(span=span, by="errors"),
        "timeline_chart": charts.column_chart(
            [charts.Bar(_bucket_label(start, span.bucket), f.calls, f.errors) for start, f in timeline],
            chart_id="usage-timeline", title=_("Calls per hour, errors hatched") if span.bucket == "hour" else _("Calls per day, errors hatched"),
        ),
        "group_chart": charts.row_chart(
            [charts.Bar(s.label, s.total.calls, s.total.errors) for s in series],
            chart_id="usage-groups", title=_("Calls per group, errors hatched"),
        ),
        "csv_query": request.GET.urlencode(),
    }
    return render(request, "usage/page.html", ctx)


def _cell(value) -> str:
    """A CSV cell that a spreadsheet will not run as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv(group: str, span: selectors.Range, series: list[selectors.Series], timeline) -> HttpResponse:
    """What the page shows: every bucket of the range for all calls, then for each group, and
    each group's total over the range (bucket `total`)."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-{group}-{span.since:%Y%m%d%H}-{span.until:%Y%m%d%H}.csv"'
    out = csv.writer(response)
    out.writerow(["group", "key", "bucket_start", "calls", "errors", "error_rate", "p50_ms", "p95_ms"])

    def row(key: str, start: str, f: selectors.Figures) -> None:
        rate = "" if f.error_rate is None else f"{f.error_rate:.4f}"
        out.writerow([group, _cell(key), start, f.calls, f.errors, rate, _cell(f.p50_ms), _cell(f.p95_ms)])

    for start, figures in timeline:
        row("(all)", start.isoformat(), figures)
    for entry in series:
        for start in span.starts():
            row(entry.key, start.isoformat(), entry.buckets.get(start, selectors.Figures()))
        row(entry.key, "total", entry.total)
    return response
