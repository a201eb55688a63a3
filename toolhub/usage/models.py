"""The usage rollup: finished invocations counted per hour, so that the Usage page, the
Overview's figures and GET /api/v1/usage read a few thousand rows instead of every
invocation (docs/usage.md). Kept by toolhub.usage.services.usage_fold."""

from __future__ import annotations

from django.db import models

# The upper bounds (ms, exclusive) of the duration histogram's buckets; one more bucket holds
# everything slower. Each bound is at most twice the one before, so a percentile estimated
# inside its bucket is off by less than the bucket's width (docs/usage.md says how much).
DURATION_BOUNDS_MS = (
    5, 10, 20, 35, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10000,
    15000, 30000, 60000, 120000, 240000,
)
BUCKETS = len(DURATION_BOUNDS_MS) + 1
HISTOGRAM = tuple(f"h{i:02d}" for i in range(BUCKETS))


class Dimension(models.TextChoices):
    """What a row's `key` is. Rows of a tool, a surface or a revision have their toolkit, so an
    owner's view of their own toolkits is a filter; rows of a client credential or a user are
    for admins only and count every toolkit together (one row per hour and caller, not per
    toolkit too: with many users that would be most of the table)."""

    TOOL = "tool", "tool"
    SURFACE = "surface", "surface"
    CLIENT = "client", "client"
    USER = "user", "user"
    REVISION = "revision", "revision"


# The dimensions whose rows count all toolkits together.
CALLERS = (Dimension.CLIENT, Dimension.USER)


class UsageHour(models.Model):
    # One row per hour (by finished_at, UTC), toolkit (none for CALLERS), dimension and key: the
    # tool's name, the surface, the client credential's id ("" for none), the user's id, the
    # revision's id.
    # Grouping sets rather than one row per combination of all five: the row count grows
    # with the sum of the dimensions' values, not with their product.
    hour = models.DateTimeField()
    toolkit = models.ForeignKey("toolkits.Toolkit", null=True, on_delete=models.CASCADE, related_name="+", db_index=False)
    dimension = models.CharField(max_length=10, choices=Dimension.choices)
    key = models.CharField(max_length=200, blank=True)
    calls = models.PositiveIntegerField()
    errors = models.PositiveIntegerField()
    # Over the calls that started (a call refused or reaped while queued has no duration).
    duration_count = models.PositiveIntegerField()
    duration_sum_ms = models.BigIntegerField()
    duration_max_ms = models.BigIntegerField(null=True)
    # The histogram: h00 … h24, how many durations fell in each bucket (DURATION_BOUNDS_MS).
    # Columns rather than an array, so that summing them is plain SQL on every database.
    for _bucket in range(BUCKETS):
        locals()[f"h{_bucket:02d}"] = models.PositiveIntegerField(default=0)
    del _bucket

    class Meta:
        indexes = [
            # The fold deletes hours from the watermark on; the pages read one dimension.
            models.Index(fields=["hour"]),
            models.Index(fields=["dimension", "hour"]),
            models.Index(fields=["toolkit", "dimension", "hour"]),
        ]


class UsageWatermark(models.Model):
    """One row: every hour before `folded_until` is final in the rollup; hours from it on are
    counted again at each fold."""

    folded_until = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)
