"""The usage rollup (toolhub.usage): the hourly rows a fold writes give the same calls and
errors as counting the invocations directly, per toolkit, tool, surface, client, user and
revision; p50/p95 land in the histogram bucket of the exact percentile; folding twice, or
again after more finished, changes nothing it should not; the scheduled task does it in a
real worker on the `maintenance` queue."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import example, start_worker
from tests.usage_fixtures import direct, fold_all, nearest_rank, same_bucket, seed
from toolhub.accounts import clients
from toolhub.runs.models import Invocation, RunStatus
from toolhub.usage import selectors, services
from toolhub.usage.models import UsageHour, UsageWatermark

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(admin, alice, bob, carol, upload):
    first = upload(alice, example("library_lookup"))
    second = upload(bob, example("library_lookup"), slug="second_lookup")
    app, _raw = clients.client_create(name="Open WebUI", by=admin)
    now = timezone.now()
    invocations = seed(toolkits=[first, second], users=[alice, bob, carol], clients=[app], count=1500, now=now)
    return {"now": now, "toolkits": [first, second], "invocations": invocations}


KEYS = {
    "toolkit": lambda inv: inv.toolkit.slug,
    "tool": lambda inv: f"{inv.toolkit.slug}/{inv.tool}",
    "surface": lambda inv: inv.surface,
    "client": lambda inv: inv.client.name if inv.client else "",
    "user": lambda inv: inv.user.username,
}


@pytest.mark.parametrize("group_by", list(KEYS))
def test_the_rollup_gives_the_counts_of_the_invocations_themselves(seeded, group_by) -> None:
    fold_all(now=seeded["now"])
    assert UsageHour.objects.exists()
    span = selectors.usage_range(since=seeded["now"] - timedelta(days=3), until=seeded["now"], bucket="day")
    series, truncated = selectors.usage_series(group_by=group_by, span=span)
    assert not truncated
    expected = direct(seeded["invocations"], key=KEYS[group_by], since=span.since, until=span.until)
    got = {s.key: s.total for s in series}
    assert {k: (f.calls, f.errors) for k, f in got.items()} == {k: (c, e) for k, (c, e, _d) in expected.items()}
    for k, (_c, _e, durations) in expected.items():
        assert got[k].duration_count == len(durations)
        assert same_bucket(got[k].p50_ms, nearest_rank(durations, 0.5)), (k, got[k].p50_ms, nearest_rank(durations, 0.5))
        assert same_bucket(got[k].p95_ms, nearest_rank(durations, 0.95)), (k, got[k].p95_ms, nearest_rank(durations, 0.95))


def test_only_the_busiest_groups_are_returned_with_exactly_their_own_figures(seeded) -> None:
    fold_all(now=seeded["now"])
    span = selectors.usage_range(since=seeded["now"] - timedelta(days=3), until=seeded["now"], bucket="day")
    expected = direct(seeded["invocations"], key=KEYS["tool"], since=span.since, until=span.until)
    for keep in (1, 2, 4):
        series, truncated = selectors.usage_series(group_by="tool", span=span, max_keys=keep)
        assert truncated and len(series) == keep
        busiest = sorted(expected.items(), key=lambda item: (-item[1][0], item[0]))[:keep]
        assert sorted((s.key, s.total.calls, s.total.errors) for s in series) == sorted((k, v[0], v[1]) for k, v in busiest)
        for entry in series:
            assert sum(f.calls for f in entry.buckets.values()) == entry.total.calls


def test_hourly_buckets_equal_the_invocations_of_each_hour(seeded) -> None:
    fold_all(now=seeded["now"])
    span = selectors.usage_range(since=seeded["now"] - timedelta(hours=30), until=seeded["now"], bucket="hour")
    total, buckets = selectors.usage_totals(span=span)
    for start in span.starts():
        expected = direct(seeded["invocations"], key=lambda inv: 1, since=start, until=start + timedelta(hours=1))
        calls, errors, _d = expected.get(1, (0, 0, []))
        got = buckets.get(start)
        assert (got.calls if got else 0, got.errors if got else 0) == (calls, errors), start
    everything = direct(seeded["invocations"], key=lambda inv: 1, since=span.since, until=span.until)[1]
    assert (total.calls, total.errors) == everything[:2]


def test_folding_twice_or_after_more_finished_counts_each_invocation_once(seeded, alice) -> None:
    now = seeded["now"]
    fold_all(now=now)
    def rows():
        return sorted(UsageHour.objects.values_list("hour", "toolkit_id", "dimension", "key", "calls", "errors"), key=repr)

    before = rows()
    services.usage_fold(now=now)
    assert rows() == before

    # One that was running finishes (in the current hour, still open): the next fold counts it once.
    running = Invocation.objects.filter(status=RunStatus.RUNNING).first()
    running.status, running.finished_at = RunStatus.FAILED, now
    running.save()
    later = now + timedelta(minutes=1)
    services.usage_fold(now=later)
    services.usage_fold(now=later)
    span = selectors.usage_range(since=now - timedelta(days=3), until=later, bucket="day")
    series, _ = selectors.usage_series(group_by="toolkit", span=span)
    invocations = list(Invocation.objects.select_related("toolkit"))
    expected = direct(invocations, key=KEYS["toolkit"], since=span.since, until=span.until)
    assert {s.key: (s.total.calls, s.total.errors) for s in series} == {k: v[:2] for k, v in expected.items()}


def test_a_large_history_is_caught_up_over_several_runs(seeded) -> None:
    now = seeded["now"]
    old = next(inv for inv in seeded["invocations"] if inv.status == RunStatus.SUCCEEDED)
    Invocation.objects.filter(pk=old.pk).update(finished_at=now - timedelta(days=20), started_at=now - timedelta(days=20))
    folds = []
    while not folds or not folds[-1].caught_up:
        folds.append(services.usage_fold(now=now))
        assert len(folds) < 30
    assert len(folds) == 21  # 20 days and part of today, a day a run
    assert UsageWatermark.objects.get().folded_until == services.floor_hour(now - services.SETTLE)
    assert UsageHour.objects.filter(hour=services.floor_hour(now - timedelta(days=20)), dimension="tool").get().calls == 1


@pytest.mark.parametrize("minutes", [5, 30])
def test_catching_up_never_moves_the_watermark_past_the_hours_still_settling(seeded, minutes) -> None:
    # Minutes after the hour, the last hour is still settling: a day's step that ends there
    # must not mark it folded (it did, 5 minutes after the hour).
    now = services.floor_hour(seeded["now"]) + timedelta(minutes=minutes)
    old = next(inv for inv in seeded["invocations"] if inv.status == RunStatus.SUCCEEDED)
    Invocation.objects.filter(pk=old.pk).update(finished_at=now - timedelta(days=3), started_at=now - timedelta(days=3))
    marks, caught_up = [], False
    while not caught_up:
        caught_up = services.usage_fold(now=now).caught_up
        marks.append(UsageWatermark.objects.get().folded_until)
        assert len(marks) < 10
    settled = services.floor_hour(now - services.SETTLE)
    assert max(marks) <= settled and marks[-1] == settled, marks


def test_the_percentile_estimate_interpolates_inside_the_bucket() -> None:
    # Ten calls between 100 and 150 ms: the median is estimated inside that bucket.
    histogram = [0] * len(selectors.HISTOGRAM)
    histogram[7] = 10
    assert selectors.estimate_percentile(histogram, 0.5, 150) == 125
    assert selectors.estimate_percentile(histogram, 0.95, 149) == 149
    assert selectors.estimate_percentile([0] * len(selectors.HISTOGRAM), 0.5, None) is None
    # The slowest call bounds the open last bucket.
    histogram = [0] * len(selectors.HISTOGRAM)
    histogram[-1] = 2
    assert selectors.estimate_percentile(histogram, 0.95, 400000) == 400000


def test_who_called_is_counted_once_per_hour_whatever_the_toolkits(seeded) -> None:
    # Two toolkits, three users: the user rows have no toolkit, one per hour and user.
    fold_all(now=seeded["now"])
    users = UsageHour.objects.filter(dimension="user")
    assert not users.exclude(toolkit=None).exists()
    assert users.count() == len({(services.floor_hour(i.finished_at), i.user_id) for i in seeded["invocations"] if i.finished_at})
    assert not UsageHour.objects.filter(dimension__in=["tool", "surface", "revision"], toolkit=None).exists()


def test_the_fold_is_scheduled_on_the_maintenance_queue() -> None:
    from django.conf import settings

    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "toolhub.usage.tasks.fold_usage" in scheduled
    assert settings.CELERY_TASK_ROUTES["toolhub.usage.tasks.fold_usage"] == {"queue": "maintenance"}


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_scheduled_task_folds_in_a_real_worker(admin, alice, upload, tmp_path) -> None:
    from toolhub import broker
    from toolhub.usage.tasks import fold_usage

    toolkit = upload(alice, example("library_lookup"))
    # Within the last day: one run of the task counts it all.
    seed(toolkits=[toolkit], users=[alice], clients=[], count=50, hours=12)
    worker = start_worker(tmp_path, queues=("maintenance",))
    try:
        broker.send(fold_usage.name)
        deadline = time.monotonic() + 30
        while not UsageWatermark.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        finished = Invocation.objects.filter(finished_at__isnull=False, status__in=["succeeded", "failed", "timed_out"]).count()
        assert sum(UsageHour.objects.filter(dimension="tool").values_list("calls", flat=True)) == finished
    finally:
        worker.kill()
    assert "fold_usage" in worker.output() and "succeeded" in worker.output()
