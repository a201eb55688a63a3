"""The Celery application. Workers listen on four queues (settings.CELERY_TASK_ROUTES): `builds`
(locks and environments), `sandbox` (introspection, tool invocations, tool tests and agent runs),
`maintenance` (the reapers and the usage fold) and Celery's default `celery` for the rest (the
package index checks)."""

import logging
import os

from celery import Celery
from celery.signals import task_prerun, worker_init, worker_process_init, worker_ready
from kombu import transport as kombu_transports

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings")
# kombu's "redis" transport (redis:// and redis+socket:// brokers) is ours: the same, but a
# broker restart cannot end a worker (toolhub.broker.RedisTransport).
kombu_transports.TRANSPORT_ALIASES["redis"] = "toolhub.broker:RedisTransport"
logger = logging.getLogger(__name__)

app = Celery("toolhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _check_sandbox(**kwargs) -> None:
    from toolhub.toolkits.sandboxing import startup_check

    startup_check()


@worker_init.connect
def _no_database_pool(**kwargs) -> None:
    """A worker connects to the database without the web process's pool (TOOLHUB_DB_POOL):
    Celery's prefork pool forks this process, and a pool's connections and threads do not
    survive a fork. A worker keeps its one connection instead (CELERY_DB_REUSE_MAX)."""
    from django.db import connections

    for alias in connections:
        database = connections[alias]
        if database.vendor == "postgresql" and database.settings_dict.get("OPTIONS", {}).get("pool"):
            database.close()
            # Only PostgreSQL's wrapper has a pool.
            database.close_pool()  # type: ignore[attr-defined]
            del database.settings_dict["OPTIONS"]["pool"]
        # The one connection lives as long as CELERY_DB_REUSE_MAX lets it (not CONN_MAX_AGE's
        # per-request 0), and is checked before each task (_drop_dead_connections).
        database.settings_dict["CONN_MAX_AGE"] = None
        database.settings_dict["CONN_HEALTH_CHECKS"] = True


@task_prerun.connect
def _drop_dead_connections(**kwargs) -> None:
    """Every task starts on a live database connection. A worker keeps its connection across
    tasks, and one that PostgreSQL dropped (a restart, a failover, `pg_terminate_backend`, an
    idle timeout) would otherwise fail every task of this process (the reaper's, builds,
    agent runs) until the worker restarts."""
    from toolhub import dbretry

    dbretry.drop_dead_connections()


@worker_init.connect
def _warm_each_pool_process(**kwargs) -> None:
    # Connected only now, after Celery's Django fix-up connected its own handler: a new pool
    # process has then dropped the database connections it inherited before this one reads.
    worker_process_init.connect(_warm_from_history, weak=False, dispatch_uid="toolhub-warm-from-history")


def _warm_from_history(**kwargs) -> None:
    """In each new pool process, on the thread that will run its tasks (a warm sandbox dies
    with the thread that started it)."""
    from toolhub.runs.warming import warm_from_history

    try:
        warmed = warm_from_history()
    except Exception:  # noqa: BLE001 - a worker that cannot warm still works, cold at first
        logger.exception("could not warm sandboxes from the recent history")
        return
    if warmed:
        logger.info("warmed %d sandbox(es) from the recent history", warmed)
