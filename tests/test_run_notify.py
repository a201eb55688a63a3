"""The waiting request is woken by the worker's notification (toolhub.runs.notify) over the real
Redis, instead of polling the database; without Redis it still polls."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from tests.test_api_invocations import toolkit  # noqa: F401 - fixture
from toolhub.api.schemas import InvocationOut
from toolhub.runs import notify
from toolhub.runs.models import Event, Invocation, RunStatus
from toolhub.runs.services import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def invocation(upload, alice):
    uploaded = upload(alice, "class Tools:\n    def go(self) -> str:\n        return 'x'\n")
    return Invocation.objects.create(
        toolkit=uploaded, revision=uploaded.latest_revision(), tool="go", user=alice, status=RunStatus.RUNNING
    )


def _answer(invocation: Invocation) -> dict:
    """The API's answer for an invocation, as a dict."""
    return InvocationOut.from_orm(invocation).model_dump()


def _finish_later(invocation_id, delay: float, *, publish: bool) -> threading.Thread:
    def target() -> None:
        try:
            time.sleep(delay)
            Invocation.objects.filter(pk=invocation_id).update(status=RunStatus.SUCCEEDED, result="done")
            if publish:
                notify.publish(invocation_id)
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def test_a_finished_invocation_wakes_its_waiter_without_polling(invocation, settings) -> None:
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    thread = _finish_later(invocation.pk, 0.6, publish=True)
    with CaptureQueriesContext(connection) as queries:
        started = time.monotonic()
        finished = wait_for(invocation, seconds=10)
        elapsed = time.monotonic() - started
    thread.join()
    assert finished.status == RunStatus.SUCCEEDED and finished.result == "done"
    assert elapsed < notify.RECHECK_SECONDS, "woken by the message, not by the periodic re-read"
    # One read before the wait and one after the message; polling at 20 ms growing by 1.5x
    # would have read the row about seven times in 0.6 s.
    assert len(queries) == 2, [query["sql"] for query in queries]


def test_a_lost_message_costs_at_most_the_recheck_interval(invocation, settings) -> None:
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    thread = _finish_later(invocation.pk, 0.2, publish=False)
    finished = wait_for(invocation, seconds=10)
    thread.join()
    assert finished.status == RunStatus.SUCCEEDED


def test_without_redis_it_polls(invocation, settings) -> None:
    settings.REDIS_URL = ""
    thread = _finish_later(invocation.pk, 0.3, publish=True)
    with CaptureQueriesContext(connection) as queries:
        finished = wait_for(invocation, seconds=10)
    thread.join()
    assert finished.status == RunStatus.SUCCEEDED
    assert len(queries) > 2


@pytest.mark.parametrize("events", [0, 2])
def test_the_answer_to_a_wait_reads_the_invocation_and_its_events_only(invocation, events) -> None:
    # As invocation_create leaves it: the toolkit and revision in hand. The wait's re-read must
    # not drop them, or the answer would read both again. It also tells whether there are
    # events: a run that sent none is answered with that one query.
    for seq in range(1, events + 1):
        Event.objects.create(invocation=invocation, seq=seq, type="status", data={"description": str(seq)})
    Invocation.objects.filter(pk=invocation.pk).update(status=RunStatus.SUCCEEDED, result="done")
    with CaptureQueriesContext(connection) as queries:
        answer = _answer(wait_for(invocation, seconds=5))
    assert answer["status"] == "succeeded" and answer["result"] == "done"
    assert answer["toolkit"] == invocation.toolkit.slug and answer["revision"] == invocation.revision.number
    assert [e["seq"] for e in answer["events"]] == list(range(1, events + 1))
    assert len(queries) == (2 if events else 1), [query["sql"] for query in queries]


def test_the_answer_after_a_wait_shows_everything_the_run_changed(invocation) -> None:
    # The wait re-reads only the fields the answer shows: the answer must be the one a fresh
    # read of the whole row gives, whatever the run wrote.
    from django.utils import timezone

    now = timezone.now()
    Invocation.objects.filter(pk=invocation.pk).update(
        status=RunStatus.FAILED, result={"partial": [1, 2]}, result_type="json", error="It broke.", traceback="tb",
        limit="memory", cpu_ms=12, max_rss_kb=3400, pending_call={"type": "input"}, call_answer={"value": 1},
        egress={"hosts": ["example.org"]}, started_at=now, finished_at=now, heartbeat_at=now, sends=2,
    )
    answer = _answer(wait_for(invocation, seconds=5))
    assert answer == _answer(Invocation.objects.get(pk=invocation.pk))


def test_the_wait_limit_still_holds(invocation, settings) -> None:
    started = time.monotonic()
    unchanged = wait_for(invocation, seconds=0.3)
    assert unchanged.status == RunStatus.RUNNING
    assert 0.3 <= time.monotonic() - started < 2


def _end_later(invocation, delay: float, **fields) -> threading.Thread:
    """The worker's own end of a run it claimed (engine._finish), with its notice."""
    from django.utils import timezone

    from toolhub.runs import engine

    def target() -> None:
        try:
            time.sleep(delay)
            claimed = Invocation.objects.get(pk=invocation.pk)
            engine._finish(claimed, RunStatus.SUCCEEDED, events=Event.objects.filter(invocation=claimed).count(), **fields)
        finally:
            connections.close_all()

    Invocation.objects.filter(pk=invocation.pk).update(started_at=timezone.now(), heartbeat_at=timezone.now())
    thread = threading.Thread(target=target)
    thread.start()
    return thread


@pytest.mark.parametrize("events", [0, 2])
def test_a_notice_that_carries_the_end_is_answered_without_reading_the_row_again(invocation, settings, events) -> None:
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    for seq in range(1, events + 1):
        Event.objects.create(invocation=invocation, seq=seq, type="status", data={"description": str(seq)})
    thread = _end_later(invocation, 0.4, result={"b": [1, "ç"], "a": None}, result_type="json", cpu_ms=3, max_rss_kb=9)
    with CaptureQueriesContext(connection) as queries:
        answer = _answer(wait_for(invocation, seconds=10))
    thread.join()
    # The read before the wait, and the events if the run stored any; none after the notice.
    assert len(queries) == (2 if events else 1), [query["sql"] for query in queries]
    assert answer == _answer(Invocation.objects.get(pk=invocation.pk))
    assert list(answer["result"]) == ["b", "a"] and answer["status"] == "succeeded"


@pytest.mark.parametrize(
    "state", [{"id": "someone else's"}, {"status": "running"}, {"finished_at": "not a time"}, {"unexpected": 1}]
)
def test_a_notice_with_another_state_is_read_from_the_database(invocation, settings, state) -> None:
    from django.utils import timezone

    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    invocation.started_at = timezone.now()
    ended = notify.ended_state(
        invocation, RunStatus.SUCCEEDED, {"result": "forged", "finished_at": timezone.now()}, has_events=False
    )

    def target() -> None:
        try:
            time.sleep(0.3)
            Invocation.objects.filter(pk=invocation.pk).update(status=RunStatus.SUCCEEDED, result="done")
            notify.publish(invocation.pk, {**ended, **state})
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    with CaptureQueriesContext(connection) as queries:
        finished = wait_for(invocation, seconds=10)
    thread.join()
    assert (finished.status, finished.result) == (RunStatus.SUCCEEDED, "done")
    assert len(queries) == 2, [query["sql"] for query in queries]


# A creator that waits subscribes before the invocation exists (notify.listen)
# ------------------------------------------------------------------------------


def _fastest_worker(monkeypatch, settings, *, record: bool = True, has_events: bool = False) -> dict:
    """Replace the task's send with the fastest worker there could be: it takes the message at
    once, and ends the run (row and notice) the moment the row is stored, so before
    invocation_create returns and any wait begins. What it saw of the invocation's subscribers
    when the task was sent is in the returned dict."""
    import redis
    from django.utils import timezone

    from toolhub.runs import services

    watcher = redis.Redis.from_url(settings.REDIS_URL)
    seen: dict = {}
    taken: list[str] = []
    store = Invocation.save

    def send(_task: str, invocation_id: str) -> None:
        seen["subscribers"] = dict(watcher.pubsub_numsub(notify.channel(invocation_id)))[notify.channel(invocation_id).encode()]
        taken.append(invocation_id)

    def save(instance, *args, **kwargs) -> None:
        store(instance, *args, **kwargs)
        if str(instance.pk) not in taken:
            return
        invocation_id = str(instance.pk)
        now = timezone.now()
        fields = {"result": "cba", "result_type": "text", "finished_at": now}
        if record:
            Invocation.objects.filter(pk=invocation_id).update(status=RunStatus.SUCCEEDED, started_at=now, **fields)
        claimed = Invocation(id=invocation_id, started_at=now)
        notify.publish(invocation_id, notify.ended_state(claimed, RunStatus.SUCCEEDED, fields, has_events=has_events))

    monkeypatch.setattr(services.broker, "send", send)
    monkeypatch.setattr(Invocation, "save", save)
    return seen


def test_a_creator_that_waits_is_subscribed_before_its_task_is_sent(toolkit, alice, settings, monkeypatch) -> None:  # noqa: F811
    from toolhub.runs.services import invocation_create

    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    seen = _fastest_worker(monkeypatch, settings, record=False)
    invocation = invocation_create(toolkit=toolkit, tool="reverse_string", arguments={"string": "abc"}, user=alice, listen=True)
    assert seen["subscribers"] == 1
    started = time.monotonic()
    with CaptureQueriesContext(connection) as queries:
        finished = wait_for(invocation, seconds=5)
    # The notice came before the wait began, and is its answer: no look at the row first (the
    # row here still says queued, so a read would have been seen), no wait for a re-read.
    assert (finished.status, finished.result) == (RunStatus.SUCCEEDED, "cba")
    assert time.monotonic() - started < notify.RECHECK_SECONDS
    assert len(queries) == 0, [query["sql"] for query in queries]
    assert getattr(finished, "listener", None) is None


def test_a_creator_that_does_not_wait_subscribes_to_nothing(toolkit, alice, settings, monkeypatch) -> None:  # noqa: F811
    from toolhub.runs.services import invocation_create

    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    seen = _fastest_worker(monkeypatch, settings)
    invocation = invocation_create(toolkit=toolkit, tool="reverse_string", arguments={"string": "abc"}, user=alice)
    assert seen["subscribers"] == 0 and invocation.listener is None


@pytest.mark.parametrize("has_events", [False, True])
def test_a_tool_server_call_waits_on_its_subscription_made_ahead(toolkit, alice, settings, monkeypatch, has_events) -> None:  # noqa: F811
    from toolhub.runs.services import invocation_create
    from toolhub.serving.calls import follow

    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    seen = _fastest_worker(monkeypatch, settings, has_events=has_events)
    invocation = invocation_create(toolkit=toolkit, tool="reverse_string", arguments={"string": "abc"}, user=alice, listen=True)
    started = time.monotonic()
    with CaptureQueriesContext(connection) as queries:
        outcome = follow(invocation)
    assert seen["subscribers"] == 1
    assert (outcome.invocation.status, outcome.invocation.result) == (RunStatus.SUCCEEDED, "cba")
    assert time.monotonic() - started < notify.RECHECK_SECONDS
    # Woken by a notice that carries the end: that is the outcome, as for the API's wait, unless
    # the run stored events (citations and sources follow the result): then the run and its
    # events are read once.
    assert len(queries) == (2 if has_events else 0), [query["sql"] for query in queries]


def test_a_subscription_made_ahead_without_redis_leaves_the_wait_to_poll(toolkit, alice, settings, monkeypatch) -> None:  # noqa: F811
    from toolhub.runs.services import invocation_create

    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    monkeypatch.setattr("toolhub.runs.services.broker.send", lambda *_args: None)
    invocation = invocation_create(toolkit=toolkit, tool="reverse_string", arguments={"string": "abc"}, user=alice, listen=True)
    assert invocation.listener is None
    thread = _finish_later(invocation.pk, 0.3, publish=False)
    finished = wait_for(invocation, seconds=10)
    thread.join()
    assert finished.status == RunStatus.SUCCEEDED


@pytest.mark.host  # kills every subscriber on the Redis server
@pytest.mark.parametrize("ahead", [True, False])
def test_a_subscription_lost_mid_wait_is_followed_by_polling(invocation, settings, ahead) -> None:
    import redis

    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    watcher = redis.Redis.from_url(settings.REDIS_URL)
    if ahead:
        invocation.listener = notify.listen(invocation.pk)

    def drop_then_finish() -> None:
        try:
            time.sleep(0.3)
            # Redis drops the waiter's connection (a restart, a timeout, a proxy), and the run
            # ends without a notice that could reach it.
            assert watcher.client_kill_filter(_type="pubsub") >= 1
            time.sleep(0.2)
            Invocation.objects.filter(pk=invocation.pk).update(status=RunStatus.SUCCEEDED, result="done")
        finally:
            connections.close_all()

    thread = threading.Thread(target=drop_then_finish)
    thread.start()
    started = time.monotonic()
    finished = wait_for(invocation, seconds=10)
    thread.join()
    assert (finished.status, finished.result) == (RunStatus.SUCCEEDED, "done")
    assert time.monotonic() - started < 3


def test_a_wait_takes_an_earlier_waits_subscriber_connection_and_only_its_own_notices(settings) -> None:
    import uuid

    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    earlier, later = uuid.uuid4(), uuid.uuid4()
    first = notify.listen(earlier)
    assert first is not None and first.confirm(1)
    # A notice for the earlier wait that it never read: still on the connection when it ends.
    notify.publish(earlier, {"id": str(earlier)})
    first.close()
    second = notify.listen(later)
    assert second is not None and second._pubsub is first._pubsub
    connection_ = second._pubsub.connection
    seen: list = []
    notify.publish(later, {"id": str(later)})
    notify.wait(later, lambda state: seen.append(state) or state is not None, seconds=2, listener=second)
    assert seen == [{"id": str(later)}]
    assert notify.listen(uuid.uuid4())._pubsub.connection is connection_


def test_a_subscriber_connection_passes_from_one_thread_to_the_next(settings) -> None:
    """The web server runs each request on a thread of its own: the connection an ended wait
    gave back is the next request's, on another thread, and no third is made."""
    import uuid

    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    used: list = []

    def one_wait() -> None:
        invocation_id = uuid.uuid4()
        listener = notify.listen(invocation_id)
        assert listener is not None
        used.append(listener._pubsub.connection)
        notify.publish(invocation_id, {"id": str(invocation_id)})
        notify.wait(invocation_id, lambda state: state is not None, seconds=2, listener=listener)

    for _ in range(3):
        thread = threading.Thread(target=one_wait)
        thread.start()
        thread.join()
    assert len(used) == 3 and used[0] is used[1] is used[2]


def test_the_idle_subscriber_connections_are_bounded(settings) -> None:
    import uuid

    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    listeners = [notify.listen(uuid.uuid4()) for _ in range(notify._IDLE_MAX + 5)]
    pubsubs = [listener._pubsub for listener in listeners]
    assert len({id(p) for p in pubsubs}) == len(pubsubs)
    for listener in listeners:
        listener.close()
    assert len(notify._idle) == notify._IDLE_MAX
    # Those beyond the bound were closed, not kept.
    assert [p.connection for p in pubsubs[notify._IDLE_MAX:]] == [None] * 5
