"""Publishing Celery tasks so that a broker outage is noticed at once: the caller answers 503
(or the reaper tries again on its next pass) instead of waiting on kombu's own retries."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import current_app
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

# Celery's own bound for the arguments' repr in a message (its argsrepr_maxsize).
ARGSREPR_MAX = 1024


def send(task_name: str, *args: object) -> None:
    """Publish a task by name (routed by settings.CELERY_TASK_ROUTES). Raises kombu's
    OperationalError (or OSError) when the broker cannot be reached.

    Left to itself, kombu retries a new broker connection for about six seconds before it
    gives up, and an API caller waits all that time for its 503. One quick retry is enough to
    ride out a broker that just restarted.

    The message's `argsrepr` (what a worker logs and monitoring shows) is the plain repr of
    the arguments, cut at Celery's own bound: Celery's default, its `saferepr`, took about
    0.5 ms of the ~1.4 ms a send costs in the web process, on every tool call's path."""
    arguments = list(args)
    # kombu's pool hands out Connections (its stubs say Producer).
    with current_app.pool.acquire(block=True) as connection:
        connection.ensure_connection(  # type: ignore[attr-defined]
            max_retries=1, interval_start=0, interval_step=0.2, interval_max=0.2
        )
        current_app.send_task(
            task_name, args=arguments, retry=False, connection=connection,  # type: ignore[arg-type]
            argsrepr=repr(arguments)[:ARGSREPR_MAX], kwargsrepr="{}",
            ignore_result=True, result_cls=Sent, add_to_parent=False,  # type: ignore[arg-type]
        )


class Sent:
    """What `send` has Celery return for a task it published. ToolHub keeps no Celery results
    (CELERY_TASK_IGNORE_RESULT, no result backend); Celery's own AsyncResult would build that
    result backend for every thread that sends (Celery keeps one per thread), and the web server
    runs each request on a new thread."""

    def __init__(self, task_id: str) -> None:
        self.id = task_id


class _ClosedSafeChannel(kombu_redis.Channel):
    """kombu's Redis channel, overriding two private methods of it: `_connparams`, without which
    a broker restart can end a worker for good, and `conn_or_acquire`, which made a Redis
    client for every message published (below). kombu offers no public hook for either."""

    _publisher: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """kombu's, but the Redis client a publish uses is made once per channel, not per
        message: redis-py's client checks its deprecated arguments against its signature each
        time one is made, a cost py-spy showed in the web server's profile of `wait: true`
        calls. The client holds no connection of its own: each command takes one from the
        channel's pool, as before."""
        if client:
            yield client
            return
        if self._publisher is None:
            self._publisher = self._create_client()  # type: ignore[attr-defined]  # not in the stubs
        yield self._publisher

    def _connparams(self, asynchronous: bool = False):
        """kombu's, but a channel whose connection was already closed raises a connection error
        (which the callers closing it ignore) instead of an AttributeError (which kills the worker).

        When the broker goes away while a worker has tasks running, Celery (5.7) first collects
        the broken connection, which closes the transport (its `client` becomes None), and then
        closes the connection again; the channel's second close tries to put the running tasks'
        messages back and asks for a new Redis client, and kombu read `None.hostname` there:
        "Unrecoverable error: AttributeError ... 'hostname'", the worker gone for good. The same
        symptom as celery/kombu#582. The messages stay in Redis's unacknowledged set either way
        (their visibility timeout restores them, or the reaper sends them again)."""
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection was closed")
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]  # not in the stubs


class RedisTransport(kombu_redis.Transport):
    Channel = _ClosedSafeChannel
