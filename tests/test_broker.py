"""toolhub.broker.send: what a task's message carries, read back from the real broker (Redis in
CI, the filesystem broker elsewhere)."""

from __future__ import annotations

import pytest

from tests.conftest import purge_queues
from toolhub import broker
from toolhub.celery import app
from toolhub.runs.tasks import run_invocation

pytestmark = pytest.mark.plain


def _next_message(queue: str):
    with app.connection_for_write() as connection:
        message = connection.default_channel.basic_get(queue, no_ack=True)
    assert message is not None, f"nothing was sent to {queue}"
    return message


def test_a_message_carries_its_arguments_and_their_plain_repr():
    purge_queues()
    broker.send(run_invocation.name, "0b6e1c2a-3f4d-4e5f-8a9b-0c1d2e3f4a5b")
    message = _next_message("sandbox")
    assert message.headers["task"] == run_invocation.name
    assert message.headers["argsrepr"] == "['0b6e1c2a-3f4d-4e5f-8a9b-0c1d2e3f4a5b']"
    assert message.headers["kwargsrepr"] == "{}"
    args, kwargs, _embed = message.decode()
    assert args == ["0b6e1c2a-3f4d-4e5f-8a9b-0c1d2e3f4a5b"] and kwargs == {}


def test_a_long_argument_is_sent_whole_and_shown_cut():
    purge_queues()
    long = "x" * 5000
    broker.send(run_invocation.name, long)
    message = _next_message("sandbox")
    assert len(message.headers["argsrepr"]) == broker.ARGSREPR_MAX
    assert message.headers["argsrepr"].startswith("['xxx")
    args, _kwargs, _embed = message.decode()
    assert args == [long]


def test_redis_brokers_get_toolhubs_transport():
    import kombu

    # Both forms a Redis broker is named in (settings: redis:// and, for a UNIX socket,
    # redis+socket://) get ToolHub's transport.
    for url in ("redis://127.0.0.1:6379/0", "redis+socket:///run/toolhub/redis.sock"):
        assert kombu.Connection(url).get_transport_cls() is broker.RedisTransport


def test_sends_from_new_threads_make_no_redis_client_and_no_result_backend(settings):
    """The web server sends each call's task from a new thread: kombu made a Redis client per
    message, and Celery a result backend per thread, for results ToolHub never keeps."""
    import threading
    from unittest import mock

    import redis

    if not settings.REDIS_URL:
        pytest.skip("the Redis transport's publishing (CI sets REDIS_URL)")
    purge_queues()
    broker.send(run_invocation.name, "first")  # the pool's connection and its channel are made
    made: list[str] = []
    original_client, original_backend = redis.Redis.__init__, type(app).backend

    def counted_client(self, *args, **kwargs):
        made.append("redis client")
        original_client(self, *args, **kwargs)

    def counted_backend(self):
        made.append("result backend")
        return original_backend.__get__(self)

    def send(number: int) -> None:
        broker.send(run_invocation.name, f"call {number}")

    with mock.patch.object(redis.Redis, "__init__", counted_client), \
            mock.patch.object(type(app), "backend", property(counted_backend)):
        for number in range(3):
            thread = threading.Thread(target=send, args=(number,))
            thread.start()
            thread.join()
    assert made == []
    assert [_next_message("sandbox").decode()[0] for _ in range(4)] == [["first"], ["call 0"], ["call 1"], ["call 2"]]
