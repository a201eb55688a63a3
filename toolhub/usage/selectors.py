"""Reading the usage rollup for the Usage page, the Overview and GET /api/v1/usage. Every
read is a few grouped queries over hourly rows, whatever the number of invocations; every
size is bounded (keys shown, buckets, range)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import F, Max, Q, QuerySet, Sum
from django.db.models.functions import TruncDay
from django.utils import timezone

from toolhub.accounts.models import ClientCredential
from toolhub.runs.models import Invocation
from toolhub.toolkits.models import Revision, Toolkit
from toolhub.usage.models import DURATION_BOUNDS_MS, HISTOGRAM, Dimension, UsageHour
from toolhub.usage.services import ERRORS, floor_hour

GROUPS = ("toolkit", "tool", "surface", "client", "user")
BUCKETS = ("hour", "day")
# Bounds of what one read may ask for.
MAX_RANGE = timedelta(days=92)
MAX_HOUR_BUCKETS = 24 * 7
MAX_KEYS = 50
TOP_TOOLS = 5
LAST_ERRORS = 10
OVERVIEW_DAYS = 7

_SUMS = {
    "calls": Sum("calls"), "errors": Sum("errors"), "duration_count": Sum("duration_count"),
    "duration_sum_ms": Sum("duration_sum_ms"), "duration_max_ms": Max("duration_max_ms"),
    **{name: Sum(name) for name in HISTOGRAM},
}


class RangeInvalid(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Range:
    since: datetime
    until: datetime
    bucket: str

    def starts(self) -> list[datetime]:
        """Every bucket's start in the range, oldest first (empty buckets are shown too)."""
        step = timedelta(hours=1) if self.bucket == "hour" else timedelta(days=1)
        moment = self.since if self.bucket == "hour" else self.since.replace(hour=0)
        found = []
        while moment < self.until:
            found.append(moment)
            moment += step
        return found


def usage_range(*, since: datetime | None, until: datetime | None, bucket: str | None, now: datetime | None = None) -> Range:
    """The range asked for, on whole hours (UTC): since rounded down, until rounded up. Seven
    days up to now by default, in hours up to two days, else in days."""
    now = now or timezone.now()
    for name, moment in (("since", since), ("until", until)):
        if moment is not None and timezone.is_naive(moment):
            raise RangeInvalid(name, f"{name} needs a time zone (for example 2026-01-31T00:00:00Z).")
    try:
        until = until or now
        since = since or until - timedelta(days=OVERVIEW_DAYS)
        since = floor_hour(since.astimezone(UTC))
        ceiling = floor_hour(until.astimezone(UTC))
        until = ceiling if ceiling == until else ceiling + timedelta(hours=1)
    except OverflowError:
        raise RangeInvalid("since", "since and until must be between the years 1 and 9999.") from None
    if since >= until:
        raise RangeInvalid("since", "since must be before until.")
    if until - since > MAX_RANGE:
        raise RangeInvalid("since", f"The range may be at most {MAX_RANGE.days} days.")
    if bucket is None:
        bucket = "hour" if until - since <= timedelta(days=2) else "day"
    if bucket not in BUCKETS:
        raise RangeInvalid("bucket", "bucket must be hour or day.")
    if bucket == "hour" and until - since > timedelta(hours=MAX_HOUR_BUCKETS):
        raise RangeInvalid("bucket", f"Hourly buckets cover at most {MAX_HOUR_BUCKETS // 24} days; use bucket=day.")
    return Range(since=since, until=until, bucket=bucket)


@dataclass
class Figures:
    """Counts and a duration histogram, summed over rollup rows."""

    calls: int = 0
    errors: int = 0
    duration_count: int = 0
    duration_sum_ms: int = 0
    duration_max_ms: int | None = None
    histogram: list[int] = field(default_factory=lambda: [0] * len(HISTOGRAM))

    @classmethod
    def of(cls, row: Any) -> Figures:
        return cls(
            calls=row["calls"] or 0, errors=row["errors"] or 0, duration_count=row["duration_count"] or 0,
            duration_sum_ms=row["duration_sum_ms"] or 0, duration_max_ms=row["duration_max_ms"],
            histogram=[row[name] or 0 for name in HISTOGRAM],
        )

    def add(self, other: Figures) -> None:
        self.calls += other.calls
        self.errors += other.errors
        self.duration_count += other.duration_count
        self.duration_sum_ms += other.duration_sum_ms
        if other.duration_max_ms is not None:
            self.duration_max_ms = max(self.duration_max_ms or 0, other.duration_max_ms)
        self.histogram = [a + b for a, b in zip(self.histogram, other.histogram, strict=True)]

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.calls if self.calls else None

    @property
    def p50_ms(self) -> int | None:
        return estimate_percentile(self.histogram, 0.50, self.duration_max_ms)

    @property
    def p95_ms(self) -> int | None:
        return estimate_percentile(self.histogram, 0.95, self.duration_max_ms)


def bucket_bounds(index: int) -> tuple[int, int | None]:
    """The lower (inclusive) and upper (exclusive, None for the last) bound of a histogram bucket, in ms."""
    low = DURATION_BOUNDS_MS[index - 1] if index else 0
    high = DURATION_BOUNDS_MS[index] if index < len(DURATION_BOUNDS_MS) else None
    return low, high


def estimate_percentile(histogram: list[int], q: float, max_ms: int | None) -> int | None:
    """The q-th percentile (nearest rank) estimated from the histogram: found in its bucket,
    then interpolated linearly between the bucket's bounds (the slowest call bounds the last
    bucket, and any bucket it falls in). The true value is in the same bucket."""
    total = sum(histogram)
    if not total:
        return None
    rank = max(1, math.ceil(round(q * total, 6)))
    seen = 0
    for index, count in enumerate(histogram):
        if count and seen + count >= rank:
            low, high = bucket_bounds(index)
            if max_ms is not None and (high is None or max_ms < high):
                high = max(max_ms, low)
            if high is None:
                return low
            return round(low + (high - low) * (rank - seen) / count)
        seen += count
    return None


@dataclass
class Series:
    key: str
    label: str
    total: Figures
    buckets: dict[datetime, Figures]


def _scoped(qs: QuerySet[UsageHour], toolkit_ids: Iterable[int] | None) -> QuerySet[UsageHour]:
    return qs if toolkit_ids is None else qs.filter(toolkit_id__in=list(toolkit_ids))


def _rows(group_by: str, span: Range, toolkit_ids: Iterable[int] | None) -> tuple[QuerySet[UsageHour], list[str]]:
    """The rollup's rows for a grouping and the fields that make a row's key."""
    dimension = Dimension.TOOL if group_by in ("toolkit", "tool") else Dimension(group_by)
    qs = _scoped(UsageHour.objects.filter(dimension=dimension, hour__gte=span.since, hour__lt=span.until), toolkit_ids)
    return qs, ["toolkit_id"] if group_by == "toolkit" else ["toolkit_id", "key"] if group_by == "tool" else ["key"]


def _bucketed(qs: QuerySet[UsageHour], span: Range) -> Any:
    return qs.annotate(start=TruncDay("hour", tzinfo=UTC) if span.bucket == "day" else F("hour"))


def _labels(group_by: str, keys: list[tuple]) -> dict[tuple, tuple[str, str]]:
    """(key, label) of each group: what the API returns and what the page shows."""
    if group_by in ("toolkit", "tool"):
        slugs = dict(Toolkit.objects.filter(pk__in={k[0] for k in keys}).values_list("pk", "slug"))
        if group_by == "toolkit":
            return {k: (slugs.get(k[0], "?"), slugs.get(k[0], "?")) for k in keys}
        return {k: (f"{slugs.get(k[0], '?')}/{k[1]}", f"{slugs.get(k[0], '?')} · {k[1]}") for k in keys}
    if group_by == "client":
        ids = [int(k[0]) for k in keys if k[0]]
        names = {str(pk): name for pk, name in ClientCredential.objects.filter(pk__in=ids).values_list("pk", "name")}
        return {k: (names.get(k[0], ""), names.get(k[0], "")) for k in keys}
    if group_by == "user":
        ids = [int(k[0]) for k in keys if k[0]]
        names = {str(pk): name for pk, name in get_user_model().objects.filter(pk__in=ids).values_list("pk", "username")}
        return {k: (names.get(k[0], ""), names.get(k[0], "")) for k in keys}
    return {k: (k[0], k[0]) for k in keys}


def _any_of(fields: list[str], keys: list[tuple]) -> Q:
    """Rows whose key is one of `keys`, or a few more: each field IN its values (an index-friendly
    test per row, where an OR of 50 pairs is tried in turn on every row). The caller drops
    combinations it did not ask for."""
    return Q(**{f"{name}__in": sorted({key[index] for key in keys}) for index, name in enumerate(fields)})


def usage_series(
    *, group_by: str, span: Range, toolkit_ids: Iterable[int] | None = None, max_keys: int = MAX_KEYS,
) -> tuple[list[Series], bool]:
    """The busiest `max_keys` groups (by calls) with their figures per bucket, and whether
    there were more. Three queries: the top keys, their buckets, their labels."""
    if group_by not in GROUPS:
        raise RangeInvalid("group_by", "group_by must be one of: " + ", ".join(GROUPS) + ".")
    toolkit_ids = None if toolkit_ids is None else list(toolkit_ids)
    if toolkit_ids is not None and group_by in ("client", "user"):
        # Their rows count every toolkit together: who called is for admins only.
        raise ValueError("grouping by caller is not filtered by toolkit")
    qs, fields = _rows(group_by, span, toolkit_ids)
    top = list(qs.values(*fields).annotate(total=Sum("calls")).order_by("-total", *fields)[: max_keys + 1])
    truncated = len(top) > max_keys
    keys = [tuple(row[f] for f in fields) for row in top[:max_keys]]
    if not keys:
        return [], False
    series = {key: Series(key="", label="", total=Figures(), buckets={}) for key in keys}
    rows: Any = _bucketed(qs.filter(_any_of(fields, keys)), span).values(*fields, "start").annotate(**_SUMS).order_by()
    for row in rows:
        figures = Figures.of(row)
        entry = series.get(tuple(row[f] for f in fields))
        if entry is None:
            continue
        entry.buckets[row["start"]] = figures
        entry.total.add(figures)
    for key, (name, label) in _labels(group_by, keys).items():
        series[key].key, series[key].label = name, label
    return [series[key] for key in keys], truncated


def usage_totals(*, span: Range, toolkit_ids: Iterable[int] | None = None) -> tuple[Figures, dict[datetime, Figures]]:
    """Everything in the range, overall and per bucket (one query)."""
    qs = _scoped(UsageHour.objects.filter(dimension=Dimension.TOOL, hour__gte=span.since, hour__lt=span.until), toolkit_ids)
    total, buckets = Figures(), {}
    rows: Any = _bucketed(qs, span).values("start").annotate(**_SUMS).order_by()
    for row in rows:
        buckets[row["start"]] = Figures.of(row)
        total.add(buckets[row["start"]])
    return total, buckets


def usage_top_tools(*, span: Range, by: str, limit: int = TOP_TOOLS) -> list[tuple[str, Figures]]:
    """The busiest tools (`by="calls"`) or those that failed most (`by="errors"`), with their
    figures over the range. Three queries: the top ones by a plain sum, then all the figures
    of just those, then their toolkits' slugs."""
    qs = UsageHour.objects.filter(dimension=Dimension.TOOL, hour__gte=span.since, hour__lt=span.until)
    ranked = qs.filter(errors__gt=0) if by == "errors" else qs
    top = list(ranked.values("toolkit_id", "key").annotate(n=Sum(by)).order_by("-n", "toolkit_id", "key")[:limit])
    if not top:
        return []
    keys = [(row["toolkit_id"], row["key"]) for row in top]
    rows: Any = qs.filter(_any_of(["toolkit_id", "key"], keys)).values("toolkit_id", "key").annotate(**_SUMS).order_by()
    figures = {(r["toolkit_id"], r["key"]): Figures.of(r) for r in rows}
    slugs = dict(Toolkit.objects.filter(pk__in={r["toolkit_id"] for r in top}).values_list("pk", "slug"))
    return [(f"{slugs.get(r['toolkit_id'], '?')} · {r['key']}", figures[(r["toolkit_id"], r["key"])]) for r in top]


@dataclass
class ToolkitUsage:
    tools: list[tuple[str, Figures]]
    revisions: list[tuple[int | None, Figures]]
    since: datetime


def toolkit_usage(*, toolkit_id: int, now: datetime | None = None) -> ToolkitUsage:
    """A toolkit's tools and revisions over the last OVERVIEW_DAYS days (two queries)."""
    since = floor_hour((now or timezone.now()) - timedelta(days=OVERVIEW_DAYS))
    qs = UsageHour.objects.filter(toolkit_id=toolkit_id, hour__gte=since)
    tools, revisions = [], []
    for row in qs.filter(dimension=Dimension.TOOL).values("key").annotate(**_SUMS).order_by("-calls", "key"):
        tools.append((row["key"], Figures.of(row)))
    rows = list(qs.filter(dimension=Dimension.REVISION).values("key").annotate(**_SUMS).order_by())
    numbers = dict(Revision.objects.filter(pk__in=[int(r["key"]) for r in rows]).values_list("pk", "number")) if rows else {}
    for row in rows:
        revisions.append((numbers.get(int(row["key"])), Figures.of(row)))
    revisions.sort(key=lambda item: -(item[0] or 0))
    return ToolkitUsage(tools=tools, revisions=revisions, since=since)


def toolkit_last_errors(*, toolkit_id: int, limit: int = LAST_ERRORS) -> QuerySet[Invocation]:
    """The toolkit's latest failed calls, newest first, read from the invocations (by the
    partial index of failures): never their arguments or results."""
    return (
        Invocation.objects.filter(toolkit_id=toolkit_id, status__in=ERRORS, finished_at__isnull=False)
        .select_related("revision", "user")
        .only("id", "tool", "surface", "status", "error", "limit", "finished_at", "user_id", "user__username",
              "revision_id", "revision__number", "toolkit_id")
        .order_by("-finished_at")[:limit]
    )
