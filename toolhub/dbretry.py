"""Database writes that survive one dropped connection.

A worker holds its database connection for as long as it lives. When PostgreSQL restarts,
fails over, or terminates the backend (`pg_terminate_backend`, an idle timeout), that
connection is dead, and Django only replaces a dead connection at the start of the next
*request*, which a worker never has. Without this, a tool that finished could not record its
result (and the reaper later failed it as a dead worker), and a heartbeat thread kept failing
for the rest of the run.

`write(fn, what=...)` calls `fn()`; if the connection turns out to be dead (an
OperationalError or InterfaceError outside a transaction), it closes it, so the next query
opens a fresh one, and calls `fn()` once more. A second failure is logged with the true reason
and raised as `WriteFailed`. `fn` must be safe to repeat: the engine's writes are conditional
updates or carry a unique key (`already_done` names the error that means the first attempt
did commit after all).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, connection, connections
from django.utils.translation import gettext_noop

logger = logging.getLogger(__name__)

# What a caller is told when a request finds the database away (the API, the tool servers and,
# translated, the pages): the server's condition, worth a retry in a moment.
UNAVAILABLE = gettext_noop("The database is unavailable right now; try again in a moment.")

T = TypeVar("T")
P = ParamSpec("P")


class WriteFailed(DatabaseError):
    """A write failed again after reconnecting; `what` says which, the cause says why."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(f"{what} failed after reconnecting to the database: {cause}")
        self.what = what


def reconnect() -> None:
    """Drop this thread's connection (dead or not) so the next query opens a new one."""
    try:
        connection.close()
    except DatabaseError:
        # Closing a connection whose server is gone can fail too; it is gone either way.
        pass


def drop_dead_connections() -> None:
    """Close this thread's database connections that no longer answer, so the next query opens
    a new one: what Django does at the start of a web request (CONN_HEALTH_CHECKS), done at the
    start of each Celery task, which is no request. The check is a `SELECT 1` on a connection
    the task is about to use anyway (bench/db_health_check.py measures it)."""
    for database in connections.all(initialized_only=True):
        if database.connection is None or database.in_atomic_block:
            continue
        # Django's own steps for a request: forget the last check (and drop a connection left
        # in a wrong state or past CONN_MAX_AGE), then check it now rather than at the first
        # query, as toolhub.plainsql's cursors skip Django's lazy check.
        database.close_if_unusable_or_obsolete()
        try:
            database.close_if_health_check_failed()
        except DatabaseError:
            reconnect()


def retried(what: str) -> Callable[[Callable[P, T]], Callable[P, T | None]]:
    """`write` around every call of the decorated function (which must be safe to repeat):
    for the steps of a build, whose first query after minutes of `uv` may find the
    connection gone."""

    def decorate(fn: Callable[P, T]) -> Callable[P, T | None]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T | None:
            return write(lambda: fn(*args, **kwargs), what=what, already_done=None)

        return wrapper

    return decorate


def write(fn: Callable[[], T], *, what: str, already_done: type[BaseException] | None = IntegrityError) -> T | None:
    """Run `fn`, reconnecting and retrying once when the connection was lost."""
    try:
        return fn()
    except (OperationalError, InterfaceError) as exc:
        if connection.in_atomic_block:
            # Inside a transaction the work so far is lost with the connection: the caller's
            # transaction must be retried as a whole, not this statement.
            raise
        logger.warning("%s: the database connection was lost (%s); reconnecting once", what, str(exc).strip())
        reconnect()
    try:
        return fn()
    except Exception as exc:
        if already_done is not None and isinstance(exc, already_done):
            # The first attempt committed before its connection dropped.
            return None
        if isinstance(exc, (OperationalError, InterfaceError)):
            reconnect()
        logger.error("%s failed after reconnecting to the database: %s", what, str(exc).strip())
        raise WriteFailed(what, exc) from exc
