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


def test_redis_brokers_use_one_client_per_channel(settings, monkeypatch):
    import kombu
    import redis

    # Both forms a Redis broker is named in (settings: redis:// and, for a UNIX socket,
    # redis+socket://) get ToolHub's transport.
    for url in ("redis://127.0.0.1:6379/0", "redis+socket:///run/toolhub/redis.sock"):
        assert kombu.Connection(url).get_transport_cls() is broker.RedisTransport
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (CI sets it)")
    purge_queues()
    broker.send(run_invocation.name, "0b6e1c2a-3f4d-4e5f-8a9b-0c1d2e3f4a5b")
    made: list[object] = []
    real_init = redis.Redis.__init__

    def counting_init(self, *args, **kwargs):
        made.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting_init)
    for _ in range(5):
        broker.send(run_invocation.name, "0b6e1c2a-3f4d-4e5f-8a9b-0c1d2e3f4a5b")
    # kombu's own transport made a client for every publish.
    assert made == []
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        made.clear()  # a new channel's own (kombu's asynchronous client, its ping)
        # What a worker does with each message: note it as unacknowledged, then ack it.
        for _ in range(6):
            message = channel.basic_get("sandbox", no_ack=False)
            assert message is not None
            message.ack()
    # One client for all of it; kombu's own made two for every message.
    assert len(made) <= 1
