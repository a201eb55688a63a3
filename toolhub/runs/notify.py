"""Tell a waiting request that an invocation changed state, instead of it polling the database.

The worker publishes on the Redis channel ``toolhub:invocation:<id>`` whenever an invocation
finishes or starts waiting for input; ``wait`` subscribes (and reads Redis's confirmation)
*before* it first reads the row, so a change between that read and the subscription cannot be
missed, and re-reads the row on each
message (and at least every ``RECHECK_SECONDS``, in case a message was lost or a worker of an
older release does not publish). Without Redis (the filesystem broker) it polls as before.
Publishing is best-effort: a lost message costs latency, never correctness.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

RECHECK_SECONDS = 1.0


def channel(invocation_id: object) -> str:
    return f"toolhub:invocation:{invocation_id}"


@lru_cache(maxsize=4)
def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)


def publish(invocation_id: object) -> None:
    if not settings.REDIS_URL:
        return
    try:
        _client(settings.REDIS_URL).publish(channel(invocation_id), b"1")
    except Exception:  # noqa: BLE001 - the waiter re-reads the row anyway
        logger.warning("could not publish the state of invocation %s", invocation_id, exc_info=True)


def wait(invocation_id: object, done: Callable[[], bool], *, seconds: float) -> None:
    """Return once ``done()`` is true or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    if settings.REDIS_URL:
        try:
            subscription = _client(settings.REDIS_URL).pubsub()
            subscription.subscribe(channel(invocation_id))
            # Only once Redis confirms is a publication sure to reach us: read that first.
            confirmed = subscription.get_message(timeout=min(RECHECK_SECONDS, seconds))
            if confirmed is None or confirmed.get("type") != "subscribe":
                raise ConnectionError("no subscription confirmation")
        except Exception:  # noqa: BLE001 - Redis unavailable: poll instead
            logger.warning("could not subscribe to invocation %s; polling", invocation_id, exc_info=True)
        else:
            try:
                while not done():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    subscription.get_message(timeout=min(remaining, RECHECK_SECONDS))
            finally:
                subscription.close()
            return
    delay = 0.02
    while not done() and time.monotonic() < deadline:
        time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 1.5, 0.25)
