"""Tell a waiting request that an invocation changed state, instead of it polling the database.

The worker publishes on the Redis channel ``toolhub:invocation:<id>`` whenever an invocation
finishes or starts waiting for input; ``wait`` subscribes (and reads Redis's confirmation)
*before* it first reads the row, so a change between that read and the subscription cannot be
missed, and re-reads the row on each message (and at least every ``RECHECK_SECONDS``, in case
a message was lost or a worker of an older release does not publish), unless the message
carries the ended run's state itself (``publish(..., state)``). The creator of an invocation
that waits for it subscribes before the row even exists (``listen``), and need neither wait for
the confirmation nor read the row first. Without Redis (the filesystem broker) it polls as
before. Publishing is best-effort: a lost message costs latency, never correctness.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

logger = logging.getLogger(__name__)

RECHECK_SECONDS = 1.0


def channel(invocation_id: object) -> str:
    return f"toolhub:invocation:{invocation_id}"


@lru_cache(maxsize=4)
def _client(url: str) -> Any:
    import redis

    # No CLIENT SETINFO after each connect: two more round trips for a name in CLIENT LIST.
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5, driver_info=None)


# An ended run's notice carries what its waiter answers with (ended_state), so
# the waiter need not read the row again (~0.3 ms of the ~11 ms of a warm call end to end);
# a larger one says only that the invocation changed.
STATE_MAX_BYTES = 64 * 1024


def publish(invocation_id: object, state: dict | None = None) -> None:
    if not settings.REDIS_URL:
        return
    data = b"1"
    if state is not None:
        encoded = json.dumps(state, ensure_ascii=False, cls=DjangoJSONEncoder).encode()
        if len(encoded) <= STATE_MAX_BYTES:
            data = encoded
    try:
        _client(settings.REDIS_URL).publish(channel(invocation_id), data)
    except Exception:  # noqa: BLE001 - the waiter re-reads the row anyway
        logger.warning("could not publish the state of invocation %s", invocation_id, exc_info=True)


def ended_state(invocation: Any, status: str, fields: dict[str, Any], *, has_events: bool) -> dict:
    """What the end of a run tells its waiter with its notice: the fields the waiter answers
    with (runs.services.WAIT_FIELDS) of `invocation`, just claimed by this worker (so every
    other one is still its default), ended with `status` and `fields` as queue.finish recorded
    them, and whether it has events."""
    started_at = invocation.started_at
    return {
        "id": str(invocation.pk), "status": status, "result": fields.get("result"), "error": fields.get("error", ""),
        "limit": fields.get("limit", ""), "pending_call": None, "egress": None,
        "started_at": started_at.isoformat() if started_at else None, "finished_at": fields["finished_at"].isoformat(),
        "has_events": has_events,
    }


def _state(message: Any) -> dict | None:
    """The state a notice carries (a JSON object), if any."""
    if not isinstance(message, dict) or message.get("type") != "message":
        return None
    data = message.get("data")
    if not isinstance(data, bytes) or not data.startswith(b"{"):
        return None
    try:
        state = json.loads(data)
    except ValueError:
        return None
    return state if isinstance(state, dict) else None


class Listener:
    """One wait's subscription to an invocation's notices, on a subscriber connection of the
    process's (``_subscriber``): that connection goes back to the process's idle ones after the
    wait, as a new one costs a connect and Redis's handshake (0.5-1 ms, measured with ``listen``
    in a loop). So it may still deliver what an earlier wait subscribed to; only this channel's
    notices are taken."""

    def __init__(self, pubsub: Any, invocation_id: object) -> None:
        self._pubsub = pubsub
        self._channel = channel(invocation_id).encode()
        self.confirmed = False
        self._early: dict | None = None
        pubsub.subscribe(self._channel)

    def next(self, timeout: float) -> dict | None:
        """This channel's next notice, or None once `timeout` seconds have passed without one.
        Raises redis's errors when the connection is lost."""
        return self._read(timeout, until_confirmed=False)

    def confirm(self, timeout: float) -> bool:
        """Whether Redis confirms the subscription within `timeout` seconds."""
        self._read(timeout, until_confirmed=True)
        return self.confirmed

    def _read(self, timeout: float, *, until_confirmed: bool) -> dict | None:
        if self._early is not None and not until_confirmed:
            message, self._early = self._early, None
            return message
        deadline = time.monotonic() + timeout
        while not (until_confirmed and self.confirmed):
            message = self._pubsub.get_message(timeout=max(deadline - time.monotonic(), 0))
            if message is None:
                return None
            if message.get("channel") == self._channel:
                if message.get("type") == "message":
                    if not until_confirmed:
                        return message
                    self._early = message
                elif message.get("type") == "subscribe":
                    self.confirmed = True
            if time.monotonic() >= deadline:
                return None
        return None

    def close(self, *, broken: bool = False) -> None:
        """Unsubscribe, and give the connection back for the process's next wait (without
        waiting for Redis's confirmation: the next wait passes over it); a broken one is dropped."""
        if not broken:
            try:
                self._pubsub.unsubscribe(self._channel)
            except Exception:  # noqa: BLE001 - then it is broken
                pass
            else:
                _release_subscriber(self._pubsub)
                return
        _drop_subscriber(self._pubsub)


# The process's idle subscriber connections. Any thread takes one: the web server runs each
# request on a new thread, so a connection per thread would be a connection per call. Each
# carries the process id and Redis URL it was made for (`toolhub_made_for`), so a forked child
# or a changed setting never takes one it does not own.
_idle: list[Any] = []
_idle_lock = threading.Lock()
# Bounds: the idle connections kept (as many as waits were ever in flight at once, up to
# this), and the subscriptions one may carry that waits never closed (a request that failed
# between listen and wait) before it is made anew.
_IDLE_MAX = 32
_SUBSCRIBER_MAX_CHANNELS = 64


def _subscriber() -> Any:
    """An open subscriber connection (a redis-py PubSub) to settings.REDIS_URL, idle until now."""
    made_for = (os.getpid(), settings.REDIS_URL)
    while True:
        with _idle_lock:
            if not _idle:
                break
            pubsub = _idle.pop()
        if pubsub.toolhub_made_for[0] != made_for[0]:
            continue  # the parent's, before a fork: its socket is not this process's to use
        if pubsub.toolhub_made_for == made_for and len(pubsub.channels) < _SUBSCRIBER_MAX_CHANNELS:
            return pubsub
        _drop_subscriber(pubsub)
    pubsub = _client(made_for[1]).pubsub()
    pubsub.toolhub_made_for = made_for
    return pubsub


def _release_subscriber(pubsub: Any) -> None:
    with _idle_lock:
        if len(_idle) < _IDLE_MAX:
            _idle.append(pubsub)
            return
    _drop_subscriber(pubsub)


def _drop_subscriber(pubsub: Any) -> None:
    try:
        pubsub.close()
    except Exception:  # noqa: BLE001 - it is being thrown away
        pass


def listen(invocation_id: object) -> Listener | None:
    """Subscribe to the notices of an invocation that is not yet in the database, for its
    creator to wait with (``wait(..., listener=...)``); None without Redis, or when the
    subscription cannot be sent (the wait then subscribes, or polls, as usual).

    Redis's confirmation is not waited for: the subscription is on its way before the row
    exists and before the invocation's task is sent, so Redis has it before any worker can
    take the run, let alone publish its end. So the waiter need not read the row first
    either; that read and the confirmation's round trip were each paid while the worker took
    the run, on a machine whose cores they share."""
    if not settings.REDIS_URL:
        return None
    pubsub = None
    try:
        pubsub = _subscriber()
        return Listener(pubsub, invocation_id)
    except Exception:  # noqa: BLE001 - Redis unavailable: the wait polls
        logger.warning("could not subscribe to invocation %s", invocation_id, exc_info=True)
        if pubsub is not None:
            _drop_subscriber(pubsub)
        return None


def wait(
    invocation_id: object, done: Callable[[dict | None], bool], *, seconds: float, listener: Listener | None = None
) -> None:
    """Return once ``done(state)`` is true or ``seconds`` have passed: `state` is what the
    latest notice carried (None before the first, and for a notice that carried nothing).
    `listener`: the subscription ``listen`` made before the invocation existed, which this
    closes; without one, ``wait`` subscribes now and first looks at the row (``done(None)``),
    which may have changed before the subscription."""
    deadline = time.monotonic() + seconds
    ahead = listener is not None
    if listener is None and settings.REDIS_URL:
        listener = _subscribe(invocation_id, seconds)
    if listener is not None:
        broken = False
        try:
            if not ahead and done(None):
                return
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    message = listener.next(min(remaining, RECHECK_SECONDS))
                except Exception:  # noqa: BLE001 - Redis went away mid-wait: poll the rest
                    logger.warning("lost the subscription to invocation %s; polling", invocation_id, exc_info=True)
                    broken = True
                    break
                if done(_state(message)):
                    return
            else:
                return
        finally:
            listener.close(broken=broken)
    delay = 0.02
    while not done(None) and time.monotonic() < deadline:
        time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 1.5, 0.25)


def _subscribe(invocation_id: object, seconds: float) -> Listener | None:
    """A subscription to the invocation's notices that Redis has confirmed, or None."""
    listener = listen(invocation_id)
    if listener is None:
        return None
    try:
        # Only once Redis confirms is a publication sure to reach us: read that first.
        if listener.confirm(min(RECHECK_SECONDS, seconds)):
            return listener
        logger.warning("Redis did not confirm the subscription to invocation %s; polling", invocation_id)
    except Exception:  # noqa: BLE001 - Redis unavailable: poll instead
        logger.warning("could not subscribe to invocation %s; polling", invocation_id, exc_info=True)
    listener.close(broken=True)
    return None
