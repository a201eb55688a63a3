"""The worker's statements on the invocation queue (toolhub.runs.queue): each is one query, and
what they return is what the ORM would (the fair order itself is tests/test_fair_queue.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.test_api_invocations import made_invocation, toolkit  # noqa: F401 - fixture
from toolhub import heartbeat
from toolhub.messages import as_written
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


@pytest.mark.parametrize(("beat_ago", "ended"), [(None, True), (heartbeat.DEAD_AFTER_SECONDS * 2, True), (1, False)])
def test_a_redelivered_message_ends_only_a_silent_run(toolkit, alice, beat_ago, ended):  # noqa: F811
    beat = None if beat_ago is None else timezone.now() - timedelta(seconds=beat_ago)
    running = made_invocation(toolkit, alice, status=RunStatus.RUNNING, heartbeat_at=beat, pending_call={"type": "input"})
    engine.run_next(str(running.pk))
    running.refresh_from_db()
    if ended:
        assert (running.status, running.error, running.pending_call) == (RunStatus.FAILED, engine.WORKER_STOPPED.english(), None)
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


def test_the_next_invocation_is_taken_in_one_statement_on_postgresql(toolkit, alice, bob, django_assert_num_queries):  # noqa: F811
    """take_next: the message's own invocation checked for an abandoned run, the fairest queued
    one chosen, claimed and loaded, in one statement on PostgreSQL (four on SQLite)."""
    from django.db import connection

    made_invocation(toolkit, alice, status=RunStatus.RUNNING, started_at=timezone.now())
    mine = made_invocation(toolkit, alice, created_at=timezone.now() - timedelta(seconds=30))
    theirs = made_invocation(toolkit, bob, created_at=timezone.now() - timedelta(seconds=1), messages=[{"role": "user", "content": "ç"}])
    now = timezone.now()
    with django_assert_num_queries(1 if connection.vendor == "postgresql" else 4):
        taken = queue.take_next(mine.pk, now=now, silent_since=now - timedelta(seconds=60), error=as_written("gone"))
    assert (taken.abandoned, taken.chosen) == (False, theirs.pk)
    expected = Invocation.objects.select_related("revision", "toolkit", "user").get(pk=theirs.pk)
    assert (expected.status, expected.started_at, expected.heartbeat_at) == (RunStatus.RUNNING, now, now)
    loaded = taken.invocation
    assert loaded is not None
    assert _fields(loaded) == _fields(expected)
    assert _fields(loaded.toolkit) == _fields(expected.toolkit) and _fields(loaded.user) == _fields(expected.user)
    assert loaded.revision.pk == expected.revision.pk and loaded.revision.toolkit is loaded.toolkit
    assert Invocation.objects.get(pk=mine.pk).status == RunStatus.QUEUED


def test_a_take_says_how_it_found_the_message_s_own_invocation_in_the_same_statement(
    toolkit, alice, bob, django_assert_num_queries  # noqa: F811
):
    """A worker that ran another's invocation, or found nothing, needs to know whether its
    message's own one is still to come: the take says so, as it found it before its claim."""
    import uuid

    from django.db import connection

    mine = made_invocation(toolkit, alice, created_at=timezone.now())
    theirs = made_invocation(toolkit, bob, created_at=timezone.now() - timedelta(seconds=5))
    now = timezone.now()
    with django_assert_num_queries(1 if connection.vendor == "postgresql" else 5):
        taken = queue.take_next(None, now=now, silent_since=now, error=as_written("gone"), own=mine.pk)
    assert taken.invocation is not None and taken.invocation.pk == theirs.pk
    assert taken.own == (RunStatus.QUEUED, mine.surface)
    # Claimed by this very take: found as it was before the claim.
    taken = queue.take_next(None, now=now, silent_since=now, error=as_written("gone"), own=mine.pk)
    assert taken.invocation.pk == mine.pk and taken.own == (RunStatus.QUEUED, mine.surface)
    # Running now, and a row not stored yet; and not asked.
    assert queue.take_next(None, now=now, silent_since=now, error=as_written("gone"), own=mine.pk).own == (RunStatus.RUNNING, mine.surface)
    assert queue.take_next(None, now=now, silent_since=now, error=as_written("gone"), own=uuid.uuid4()).own == (None, None)
    assert queue.take_next(None, now=now, silent_since=now, error=as_written("gone")).own is None


@pytest.mark.parametrize("beat_ago", [None, 1])
def test_taking_the_next_ends_the_message_s_own_run_only_if_it_is_silent(toolkit, alice, beat_ago):  # noqa: F811
    beat = None if beat_ago is None else timezone.now() - timedelta(seconds=beat_ago)
    running = made_invocation(toolkit, alice, status=RunStatus.RUNNING, heartbeat_at=beat, pending_call={"type": "input"})
    queued = made_invocation(toolkit, alice)
    now = timezone.now()
    taken = queue.take_next(running.pk, now=now, silent_since=now - timedelta(seconds=10), error=as_written("gone"))
    running.refresh_from_db()
    assert taken.abandoned is (beat_ago is None)
    assert running.status == (RunStatus.FAILED if beat_ago is None else RunStatus.RUNNING)
    assert running.error == ("gone" if beat_ago is None else "")
    # In the same statement the queued one is still chosen and claimed.
    assert taken.chosen == queued.pk and taken.invocation is not None and taken.invocation.pk == queued.pk


def test_taking_from_an_empty_queue_claims_nothing(toolkit, alice):  # noqa: F811
    made_invocation(toolkit, alice, status=RunStatus.RUNNING, heartbeat_at=timezone.now())
    now = timezone.now()
    assert queue.take_next(None, now=now, silent_since=now, error=as_written("gone")) == queue.Taken(False, None, None)


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_loses_the_race_for_its_choice_claims_nothing(toolkit, alice, monkeypatch):  # noqa: F811
    """Two workers choose the same invocation: the one whose claim comes second finds it taken
    (on PostgreSQL its UPDATE waits for the first one's row lock, then re-checks the status)."""
    from django.db import connection

    queued = made_invocation(toolkit, alice)
    now = timezone.now()
    if connection.vendor != "postgresql":
        # SQLite's take_next is four statements: the claim after the choice finds it taken.
        Invocation.objects.filter(pk=queued.pk).update(status=RunStatus.RUNNING, started_at=now)
        monkeypatch.setattr(queue, "fairest_queued", lambda: queued.pk)
        taken = queue.take_next(None, now=now, silent_since=now, error=as_written("gone"))
        assert taken == queue.Taken(False, queued.pk, None)
        return
    import threading

    import psycopg

    other = psycopg.connect(**{k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"})
    try:
        # The other worker's claim, not committed yet: this worker's statement chooses the same
        # invocation (its snapshot still has it queued) and waits for the row.
        other.execute(
            f"UPDATE {queue.table(Invocation)} SET status = %s WHERE id = %s", [RunStatus.RUNNING.value, queued.pk]
        )
        threading.Timer(0.3, other.commit).start()
        taken = queue.take_next(None, now=now, silent_since=now, error=as_written("gone"))
    finally:
        other.close()
    assert taken == queue.Taken(False, queued.pk, None)
    assert Invocation.objects.get(pk=queued.pk).started_at is None


def test_a_take_whose_answer_was_lost_is_still_ours_and_a_lost_race_is_not(toolkit, alice, monkeypatch):  # noqa: F811
    """dbretry tries again after a dropped connection: if the first try had claimed one, that
    one is this worker's; an invocation another worker claimed at the same microsecond is not
    taken for it, except when dbretry retried."""
    queued = made_invocation(toolkit, alice)
    other = made_invocation(toolkit, alice)
    real_write = engine.dbretry.write

    def write_answer_lost(fn, *, what, **kwargs):
        if what.startswith("taking"):
            fn()  # committed, but its answer never arrived
        return real_write(fn, what=what, **kwargs)

    monkeypatch.setattr(engine.dbretry, "write", write_answer_lost)
    taken = engine._take(None)
    assert taken.invocation is not None and taken.invocation.pk == queued.pk
    assert Invocation.objects.get(pk=other.pk).status == RunStatus.QUEUED
    monkeypatch.setattr(engine.dbretry, "write", real_write)
    # Without a retry the same timestamp means nothing: the next take claims the other one.
    moment = timezone.now()
    Invocation.objects.filter(pk=queued.pk).update(started_at=moment, heartbeat_at=moment)
    monkeypatch.setattr(engine.timezone, "now", lambda: moment)
    taken = engine._take(None)
    assert taken.invocation is not None and taken.invocation.pk == other.pk


def _prepared_statements() -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_the_worker_s_statements_are_prepared_once_per_connection_on_postgresql(toolkit, alice, monkeypatch):  # noqa: F811
    """toolhub.plainsql.cursor binds on the server, so psycopg prepares each statement on its
    second run (settings.TOOLHUB_DB_PREPARED) and PostgreSQL no longer plans it for every call;
    the ORM's own queries stay unprepared."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's (CI sets DATABASE_URL)")
    for _ in range(3):
        made = made_invocation(toolkit, alice)
        now = timezone.now()
        taken = queue.take_next(None, now=now, silent_since=now, error=as_written("gone"))
        assert taken.invocation is not None and taken.invocation.pk == made.pk
        Invocation.objects.filter(pk=made.pk).update(status=RunStatus.SUCCEEDED)
    prepared = _prepared_statements()
    assert any(statement.startswith("WITH abandoned AS (UPDATE") for statement in prepared), prepared
    assert not any("runs_invocation" in statement and statement.startswith("INSERT") for statement in prepared)
    # Without the setting, the same statement runs on Django's own cursor, unprepared.
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "prepare_threshold", None)
    before = len(prepared)
    for _ in range(3):
        assert queue.load_for_run("00000000-0000-0000-0000-000000000000") is None
    assert len(_prepared_statements()) == before


def test_every_foreign_key_of_an_invocation_leads_one_index_and_has_no_second_one() -> None:
    # Deletes (a toolkit's, a user's) and the fair queue's and rate limits' lookups find their rows
    # through an index; a single-column index beside a composite one that starts with the same
    # column only costs every insert and every claim and end of a run one more index write.
    from django.db import connection

    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Invocation._meta.db_table)
    indexes = [c["columns"] for c in constraints.values() if c["index"] and not c["primary_key"]]
    for field in Invocation._meta.concrete_fields:
        if not field.is_relation:
            continue
        leading = [columns for columns in indexes if columns[0] == field.column]
        assert leading, f"no index starts with {field.column}: {indexes}"
        if any(len(columns) > 1 for columns in leading):
            assert [field.column] not in leading, f"{field.column} has an index of its own beside {leading}"
