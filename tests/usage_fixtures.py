"""Invocations with chosen outcomes, surfaces, callers and durations for the usage tests, and
the same figures counted straight from the invocations, to compare the rollup's with."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

from django.utils import timezone

from toolhub.runs.models import FINISHED, Invocation, RunStatus, Surface

ERROR_STATES = (RunStatus.FAILED, RunStatus.TIMED_OUT)
DURATIONS_MS = (0, 3, 12, 40, 90, 180, 420, 900, 2500, 9000, 45000, 400000)


def seed(*, toolkits, users, clients, count: int, now: datetime | None = None, hours: int = 48, rng_seed: int = 7) -> list[Invocation]:
    """`count` invocations over the last `hours` hours: most succeeded, some failed or timed
    out, a few still queued or running (never counted), some without a start (no duration)."""
    rng = random.Random(rng_seed)
    now = now or timezone.now()
    rows = []
    for _ in range(count):
        toolkit = rng.choice(toolkits)
        status = rng.choices(
            [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.RUNNING, RunStatus.QUEUED], [70, 15, 5, 5, 5]
        )[0]
        created = now - timedelta(seconds=rng.randint(60, hours * 3600))
        started = None if rng.random() < 0.05 else created + timedelta(milliseconds=rng.randint(0, 50))
        finished = None
        if status in FINISHED:
            base = started or created
            finished = base + timedelta(milliseconds=rng.choice(DURATIONS_MS) + rng.randint(0, 3))
            finished = min(finished, now - timedelta(seconds=1))
            if started and started > finished:
                started = finished
        elif status == RunStatus.RUNNING:
            started = started or created
        rows.append(Invocation(
            toolkit=toolkit, revision=toolkit.current_revision or toolkit.latest_revision(), tool=rng.choice(["alpha", "beta", "gamma"]),
            user=rng.choice(users), client=rng.choice([*clients, None]), surface=rng.choice(Surface.values),
            status=status, error="boom: went wrong" if status in ERROR_STATES else "", arguments={"secret_arg": "carol-private"},
            created_at=created, started_at=started if status != RunStatus.QUEUED else None, finished_at=finished,
        ))
    return Invocation.objects.bulk_create(rows, batch_size=2000)


def direct(invocations, *, key, since: datetime, until: datetime) -> dict:
    """{key: (calls, errors, durations sorted)} counted from the invocations themselves."""
    found: dict = {}
    for inv in invocations:
        if inv.status not in FINISHED or inv.finished_at is None or not (since <= inv.finished_at < until):
            continue
        calls, errors, durations = found.get(key(inv), (0, 0, []))
        duration = None
        if inv.started_at:
            duration = int((inv.finished_at - inv.started_at).total_seconds() * 1000)
        found[key(inv)] = (calls + 1, errors + (inv.status in ERROR_STATES), durations + ([duration] if duration is not None else []))
    return {k: (c, e, sorted(d)) for k, (c, e, d) in found.items()}


def nearest_rank(durations: list[int], q: float) -> int | None:
    if not durations:
        return None
    return durations[max(1, math.ceil(round(q * len(durations), 6))) - 1]


def same_bucket(estimate: int | None, exact: int | None) -> bool:
    """Whether the estimated percentile is in the histogram bucket that holds the exact one."""
    from toolhub.usage.models import DURATION_BOUNDS_MS

    if estimate is None or exact is None:
        return estimate is None and exact is None

    def bucket(ms: int) -> int:
        return sum(1 for bound in DURATION_BOUNDS_MS if ms >= bound)

    return bucket(exact) == bucket(estimate) or (bucket(estimate) == bucket(exact) + 1 and estimate in DURATION_BOUNDS_MS)


def fold_all(now: datetime | None = None) -> None:
    """Run the fold until it has caught up (a run counts at most a day)."""
    from toolhub.usage import services

    for _ in range(100):
        if services.usage_fold(now=now).caught_up:
            return
    raise AssertionError("the fold did not catch up in 100 runs")
