"""Readiness: can this web process serve, and is there anyone to do the work it queues?

Three checks, each bounded in time: the database answers `SELECT 1`; the broker accepts a
connection (one quick retry, as toolhub.broker's sends do); and the live Celery workers, by
queue, as they answer a broadcast within TOOLHUB_READY_TIMEOUT_SECONDS. A check's result is
"ok" or a reason made of fixed words and an exception's class name, never the exception's
text: a driver's message can carry a host, a user or a URL, and these answers are public."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection

from toolhub import dbretry

logger = logging.getLogger(__name__)

OK = "ok"
# The queues the workers must serve (CELERY_TASK_ROUTES): tool calls and introspection, builds,
# and the reapers.
WORK_QUEUES = ("sandbox", "builds", "maintenance")
# At most this many workers' replies are read (a broadcast's answer is one message per worker).
MAX_WORKERS = 1000


@dataclass
class Readiness:
    database: str = OK
    broker: str = OK
    workers: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WORK_QUEUES, 0))
    reasons: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.reasons

    def as_dict(self) -> dict:
        return {
            "status": "ok" if self.ready else "unavailable",
            "checks": {"database": self.database, "broker": self.broker, "workers": dict(self.workers)},
            "reasons": list(self.reasons),
        }


def _failure(what: str, exc: BaseException) -> str:
    # The class name only (see the module's docstring); the log gets the whole message.
    logger.warning("readiness: %s failed: %s: %s", what, type(exc).__name__, str(exc).strip()[:500])
    return f"unreachable ({type(exc).__name__})"


def check_database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        # The next request starts on a fresh connection.
        dbretry.reconnect()
        return _failure("the database", exc)
    return OK


@contextmanager
def broker_connection() -> Iterator[Any]:
    """A connection to the broker, or kombu's error after one quick retry (as toolhub.broker's
    sends: kombu alone would retry for seconds)."""
    from toolhub.celery import app

    with app.connection_for_write() as conn:
        # The stubs want whole seconds.
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0.2, interval_max=0.2)  # type: ignore[arg-type]
        yield conn


def check_broker() -> str:
    try:
        with broker_connection():
            pass
    except Exception as exc:  # noqa: BLE001 - kombu raises its own, redis-py's and OSError
        return _failure("the broker", exc)
    return OK


def live_workers(*, timeout: float) -> dict[str, int]:
    """How many workers consume each of WORK_QUEUES, by their answers to one broadcast
    (Celery's `inspect active_queues`), waiting `timeout` seconds for them."""
    from toolhub.celery import app

    counts = dict.fromkeys(WORK_QUEUES, 0)
    replies = app.control.inspect(timeout=timeout, limit=MAX_WORKERS).active_queues() or {}
    for queues in replies.values():
        for name in {queue.get("name") for queue in queues or () if isinstance(queue, dict)}:
            if name in counts:
                counts[name] += 1
    return counts


def readiness() -> Readiness:
    result = Readiness()
    result.database = check_database()
    if result.database != OK:
        result.reasons.append(f"database: {result.database}")
    result.broker = check_broker()
    if result.broker != OK:
        result.reasons.append(f"broker: {result.broker}")
        # Nobody can answer a broadcast on a broker that cannot be reached.
        return result
    try:
        result.workers = live_workers(timeout=settings.TOOLHUB_READY_TIMEOUT_SECONDS)
    except Exception as exc:  # noqa: BLE001 - as check_broker
        result.reasons.append(f"workers: {_failure('the workers broadcast', exc)}")
        return result
    for queue, count in result.workers.items():
        if count == 0:
            result.reasons.append(f"workers: no live worker consumes the {queue} queue")
    return result
