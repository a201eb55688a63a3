"""GET /api/v1/usage: the usage rollup's figures (docs/usage.md). Admins see everything; a
toolkit's owner sees the calls of the toolkits they own, grouped by toolkit, tool or surface
(who called is for admins only); anyone else gets no items. Client credentials are refused
(DEFAULT_AUTH), as on every endpoint that is not for calling tools."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Router, Schema, Status

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import is_admin
from toolhub.api.schemas import ErrorOut, IsoDateTime
from toolhub.toolkits.models import Toolkit
from toolhub.usage import selectors

router = Router(tags=["usage"])




class UsageBucketOut(Schema):
    start: datetime
    calls: int
    errors: int
    p50_ms: int | None
    p95_ms: int | None


class UsageItemOut(Schema):
    key: str
    label: str
    buckets: list[UsageBucketOut]


class UsageOut(Schema):
    group_by: str
    since: datetime
    until: datetime
    bucket: str
    # True when more groups had calls than the MAX_KEYS busiest returned.
    truncated: bool
    items: list[UsageItemOut]


def _refusal(status: int, message: str, field: str | None = None) -> Status[dict[str, Any]]:
    return Status(status, {"errors": [{"message": message, "field": field, "line": None}]})


@router.get("/usage", response={200: UsageOut, 400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 503: ErrorOut})
def usage(
    request: AuthenticatedHttpRequest, group_by: Literal["toolkit", "tool", "surface", "client", "user"] = "toolkit",
    since: IsoDateTime | None = None, until: IsoDateTime | None = None, bucket: Literal["hour", "day"] | None = None,
) -> dict[str, Any] | Status[dict[str, Any]]:
    """Calls, errors and estimated p50/p95 durations per group and per hour or day (UTC), for
    the busiest groups (at most 50) over at most 92 days (7 days in hours). Seven days up to
    now by default, in hours up to two days, else in days."""
    toolkit_ids = None
    if not is_admin(request.user):
        if group_by in ("client", "user"):
            return _refusal(403, "Only admins may see who called; group by toolkit, tool or surface.", "group_by")
        toolkit_ids = list(Toolkit.objects.filter(owner=request.user).values_list("pk", flat=True)[:10000])
    try:
        span = selectors.usage_range(since=since, until=until, bucket=bucket)
    except selectors.RangeInvalid as exc:
        return _refusal(400, exc.message, exc.field)
    series, truncated = selectors.usage_series(group_by=group_by, span=span, toolkit_ids=toolkit_ids)
    items = [
        {
            "key": entry.key, "label": entry.label,
            "buckets": [
                {"start": start, "calls": f.calls, "errors": f.errors, "p50_ms": f.p50_ms, "p95_ms": f.p95_ms}
                for start in span.starts() for f in [entry.buckets.get(start, selectors.Figures())]
            ],
        }
        for entry in series
    ]
    return {"group_by": group_by, "since": span.since, "until": span.until, "bucket": span.bucket, "truncated": truncated, "items": items}
