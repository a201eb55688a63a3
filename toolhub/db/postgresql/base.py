"""Django's PostgreSQL backend, with the web process's pool (TOOLHUB_DB_POOL) checking a
connection before it hands it out without a round trip to the server where none is needed.

Django's pool check (CONN_HEALTH_CHECKS) is psycopg_pool's: an empty query, a round trip before
every request's first query (~0.3-0.5 ms here, more when the server's process had gone idle), on
every tool call. A server that ends a connection (a restart, a failover, pg_terminate_backend)
says so first, an error message and then the end of the stream; so a connection with nothing
waiting to be read is one it has not ended, and only one with something to read gets the round
trip, which raises if the connection is gone (the pool then discards it and hands out another).
Everything else is Django's backend as it is; settings.py names this one only with the pool.
"""

from __future__ import annotations

import select
from typing import Any

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


def check(connection: Any) -> None:
    """The pool's check: return quietly for a usable connection, raise for one that is not."""
    if connection.closed or connection.broken:
        raise ConnectionError("the connection is closed")
    poller = select.poll()
    poller.register(connection.fileno(), select.POLLIN | select.POLLPRI)
    if poller.poll(0):
        # The server sent something unasked: most likely that it is closing the connection.
        ConnectionPool.check_connection(connection)


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        # Django builds the pool with psycopg_pool's own check when CONN_HEALTH_CHECKS is on and
        # with none when it is off, as settings.py sets it with the pool: this one's is given to
        # the pool Django built before the pool is opened (at its first connection), through the
        # attribute psycopg_pool keeps it in (tests/test_db_pool.py fails if that changes).
        made = super().pool
        if made is not None and made._check is None:
            made._check = check
        return made
