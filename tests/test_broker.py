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
