"""Django's PostgreSQL backend, with a pooled connection checked once, by us, as it is handed out.

psycopg_pool's own check (what Django passes it with CONN_HEALTH_CHECKS) finds dead connections
one at a time and waits between them (1 s, then about 2 s, ... its reconnection backoff): after
PostgreSQL restarted, failed over or terminated the backends, every idle connection in the pool
is dead, and the first request waited out the pool's whole timeout (TOOLHUB_DB_POOL_TIMEOUT, 3 s)
and answered 503. Here one dead connection makes the pool check all its idle ones at once
(`ConnectionPool.check`, which replaces the dead), and the request takes a fresh connection.
Used only with the pool (toolhub/settings.py, TOOLHUB_DB_POOL).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db.backends.postgresql import base

logger = logging.getLogger(__name__)


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = super().get_new_connection(conn_params)
        pool = self.pool
        if pool is None:
            return connection
        from psycopg_pool import ConnectionPool

        try:
            ConnectionPool.check_connection(connection)
        except Exception as exc:  # noqa: BLE001 - any failure of the check means a dead connection
            logger.warning("a pooled database connection was dead (%s); checking the pool's others", str(exc).strip())
            pool.putconn(connection)  # broken: the pool discards it and opens another
            pool.check()
            connection = super().get_new_connection(conn_params)
        return connection
