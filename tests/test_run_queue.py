"""The worker's statements on the invocation queue (toolhub.runs.queue): each is one query, and
what they return is what the ORM would (the fair order itself is tests/test_fair_queue.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.test_api_invocations import made_invocation, toolkit  # noqa: F401 - fixture
from toolhub.runs import engine, queue
from toolhub.runs.models import Invocation, RunStatus

pytestmark = pytest.mark.django_db


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_an_invocation_loads_with_its_revision_toolkit_and_user_in_one_query(toolkit, alice, django_assert_num_queries):  # noqa: F811
    made = made_invocation(
        toolkit, alice, messages=[{"role": "user", "content": "hé"}], files=[{"name": "ç.txt"}],
        heartbeat_at=timezone.now(),
    )
    expected = Invocation.objects.select_related("revision", "toolkit", "user").get(pk=made.pk)
    with django_assert_num_queries(1):
        loaded = queue.load_for_run(str(made.pk))
        assert loaded is not None
        assert _fields(loaded) == _fields(expected)
        assert _fields(loaded.toolkit) == _fields(expected.toolkit)
        assert _fields(loaded.user) == _fields(expected.user)
        assert loaded.revision.toolkit is loaded.toolkit
        revision = {k: v for k, v in _fields(expected.revision).items() if k not in queue.LEFT_OUT[type(expected.revision)]}
        assert {k: getattr(loaded.revision, k) for k in revision} == revision
    # The large columns left out are read when asked for, once.
    with django_assert_num_queries(1):
        assert loaded.revision.source == expected.revision.source
    assert queue.load_for_run("00000000-0000-0000-0000-000000000000") is None


def test_the_fairest_queued_invocation_is_chosen_in_one_query(toolkit, alice, bob, django_assert_num_queries):  # noqa: F811
    made_invocation(toolkit, alice, status=RunStatus.RUNNING, started_at=timezone.now())
    made_invocation(toolkit, alice, created_at=timezone.now() - timedelta(seconds=30))
    theirs = made_invocation(toolkit, bob, created_at=timezone.now() - timedelta(seconds=1))
    with django_assert_num_queries(1):
        assert engine.fairest_queued() == theirs.pk


@pytest.mark.parametrize(("beat_ago", "ended"), [(None, True), (engine.DEAD_AFTER_SECONDS * 2, True), (1, False)])
def test_a_redelivered_message_ends_only_a_silent_run(toolkit, alice, beat_ago, ended):  # noqa: F811
    beat = None if beat_ago is None else timezone.now() - timedelta(seconds=beat_ago)
    running = made_invocation(toolkit, alice, status=RunStatus.RUNNING, heartbeat_at=beat, pending_call={"type": "input"})
    engine.run_next(str(running.pk))
    running.refresh_from_db()
    if ended:
        assert (running.status, running.error, running.pending_call) == (RunStatus.FAILED, engine.WORKER_STOPPED, None)
        assert running.finished_at is not None
    else:
        assert (running.status, running.error) == (RunStatus.RUNNING, "")


def test_an_end_is_recorded_once_with_every_field(toolkit, alice, django_assert_num_queries):  # noqa: F811
    running = made_invocation(toolkit, alice, status=RunStatus.RUNNING, pending_call={"type": "input"})
    ended_at = timezone.now()
    fields = {
        "result": {"ordered": [1, "ç"], "a": None}, "result_type": "json", "limit": "memory", "cpu_ms": 12,
        "max_rss_kb": 3400, "traceback": "Traceback…", "finished_at": ended_at,
    }
    with django_assert_num_queries(1):
        assert queue.finish(running.pk, RunStatus.SUCCEEDED, fields)
    running.refresh_from_db()
    assert {name: getattr(running, name) for name in fields} == fields
    assert (running.status, running.pending_call) == (RunStatus.SUCCEEDED, None)
    # An ended invocation is never changed again.
    assert not queue.finish(running.pk, RunStatus.FAILED, {"error": "late", "finished_at": timezone.now()})
    running.refresh_from_db()
    assert (running.status, running.error, running.finished_at) == (RunStatus.SUCCEEDED, "", ended_at)


def test_a_worker_that_loses_the_race_for_an_invocation_does_not_take_it_for_its_own(toolkit, alice, monkeypatch):  # noqa: F811
    """Two workers choose the same invocation and read the clock in the same microsecond: the
    one whose claim updated nothing must not take the other's claim for a lost answer of its own
    (it ran the invocation a second time, and another queued one was never run)."""
    moment = timezone.now()
    theirs = made_invocation(toolkit, alice, status=RunStatus.RUNNING, started_at=moment, heartbeat_at=moment)
    monkeypatch.setattr(engine.timezone, "now", lambda: moment)
    invocation, claimed = engine._claim(str(theirs.pk))
    assert invocation is not None and invocation.pk == theirs.pk
    assert not claimed


def test_a_claim_whose_answer_was_lost_is_still_ours(toolkit, alice, monkeypatch):  # noqa: F811
    """dbretry tries a write again after a dropped connection; if the first try had committed,
    the second finds the invocation claimed, by this worker's own timestamp."""
    queued = made_invocation(toolkit, alice)
    real_write = engine.dbretry.write

    def write_answer_lost(fn, *, what):
        if what.startswith("claiming"):
            fn()  # committed, but its answer never arrived
        return real_write(fn, what=what)

    monkeypatch.setattr(engine.dbretry, "write", write_answer_lost)
    invocation, claimed = engine._claim(str(queued.pk))
    assert claimed and invocation is not None and invocation.status == RunStatus.RUNNING
