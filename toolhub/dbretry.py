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

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, connection

logger = logging.getLogger(__name__)

T = TypeVar("T")


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
