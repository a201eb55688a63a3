"""Keeping the usage rollup (toolhub.usage.models): `usage_fold` counts the invocations that
finished since the watermark into hourly rows. It recounts whole hours from the invocations
(delete, then insert), never adds to what is there, so running it twice, or again after a
crash half-way, gives the same rows; concurrent runs wait for each other on the watermark row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, Min, Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from toolhub.runs.models import FINISHED, Invocation, RunStatus
from toolhub.usage.models import CALLERS, DURATION_BOUNDS_MS, HISTOGRAM, Dimension, UsageHour, UsageWatermark

# An invocation's finished_at is set a moment before its transaction commits: hours are
# counted again until this long after they ended, so a late commit is not left out.
SETTLE = timedelta(minutes=10)
# At most this much of the history is counted by one run, so that a run never holds the
# `maintenance` queue (and the reapers behind it) for long: the first runs on a large database
# catch up a day at a time, one a minute.
MAX_SPAN = timedelta(days=1)
ERRORS = (RunStatus.FAILED, RunStatus.TIMED_OUT)
# The invocation's field that each dimension's key is.
KEY_FIELDS = {
    Dimension.TOOL: "tool", Dimension.SURFACE: "surface", Dimension.CLIENT: "client_id",
    Dimension.USER: "user_id", Dimension.REVISION: "revision_id",
}
WATERMARK_PK = 1


@dataclass(frozen=True)
class Fold:
    start: datetime
    stop: datetime
    rows: int
    # False when the run stopped at MAX_SPAN and more history is left to count.
    caught_up: bool


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _initial_watermark(now: datetime) -> datetime:
    first = Invocation.objects.filter(finished_at__isnull=False).aggregate(first=Min("finished_at"))["first"]
    return floor_hour(first or now)


def _ms(value: timedelta | None) -> int | None:
    return None if value is None else int(value.total_seconds() * 1000)


def _histogram_counts() -> dict[str, Count]:
    bounds = [None, *DURATION_BOUNDS_MS, None]
    counts = {}
    for name, low, high in zip(HISTOGRAM, bounds, bounds[1:], strict=False):
        where = Q()
        if low is not None:
            where &= Q(duration__gte=timedelta(milliseconds=low))
        if high is not None:
            where &= Q(duration__lt=timedelta(milliseconds=high))
        counts[name] = Count("pk", filter=where)
    return counts


def _rows(start: datetime, stop: datetime) -> list[UsageHour]:
    finished = Invocation.objects.filter(finished_at__gte=start, finished_at__lt=stop, status__in=FINISHED).annotate(
        bucket=TruncHour("finished_at", tzinfo=UTC),
        duration=ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField()),
    )
    figures = {
        "calls": Count("pk"), "errors": Count("pk", filter=Q(status__in=ERRORS)), "duration_count": Count("duration"),
        "duration_sum": Sum("duration"), "duration_max": Max("duration"), **_histogram_counts(),
    }
    rows = []
    for dimension, field in KEY_FIELDS.items():
        keys = ("bucket", field) if dimension in CALLERS else ("bucket", "toolkit_id", field)
        for row in finished.values(*keys).annotate(**figures).order_by():
            rows.append(UsageHour(
                hour=row["bucket"], toolkit_id=row.get("toolkit_id"), dimension=dimension,
                key="" if row[field] is None else str(row[field])[:200],
                calls=row["calls"], errors=row["errors"], duration_count=row["duration_count"],
                duration_sum_ms=_ms(row["duration_sum"]) or 0, duration_max_ms=_ms(row["duration_max"]),
                **{name: row[name] for name in HISTOGRAM},
            ))
    return rows


def usage_fold(*, now: datetime | None = None) -> Fold:
    """Count again every hour from the watermark on (at most MAX_SPAN of them) and move the
    watermark to the last hour that ended SETTLE ago."""
    now = now or timezone.now()
    with transaction.atomic():
        if not UsageWatermark.objects.filter(pk=WATERMARK_PK).exists():
            UsageWatermark.objects.bulk_create(
                [UsageWatermark(pk=WATERMARK_PK, folded_until=_initial_watermark(now))], ignore_conflicts=True
            )
        mark = UsageWatermark.objects.select_for_update().get(pk=WATERMARK_PK)
        start = mark.folded_until
        stop = min(now, start + MAX_SPAN)
        UsageHour.objects.filter(hour__gte=start, hour__lt=stop).delete()
        rows = UsageHour.objects.bulk_create(_rows(start, stop), batch_size=1000)
        caught_up = stop == now
        # Never past the hours that may still get invocations finishing late (SETTLE), also
        # while catching up: a day's step can end minutes before now.
        mark.folded_until = max(start, min(stop, floor_hour(now - SETTLE)))
        mark.save(update_fields=["folded_until", "updated_at"])
    return Fold(start=start, stop=stop, rows=len(rows), caught_up=caught_up)


def usage_refold(*, since: datetime | None = None) -> None:
    """Count everything from `since` (or from the first invocation) again at the next fold:
    after invocations were deleted or imported."""
    with transaction.atomic():
        UsageWatermark.objects.filter(pk=WATERMARK_PK).delete()
        if since is not None:
            UsageWatermark.objects.create(pk=WATERMARK_PK, folded_until=floor_hour(since))
