"""What the database health check at the start of every Celery task costs.

    DATABASE_URL=postgres://… .venv/bin/python bench/db_health_check.py [--calls N] [--cuts C]

A worker keeps its database connection across tasks (CELERY_DB_REUSE_MAX) and checks it before
each task (toolhub.dbretry.drop_dead_connections, from Celery's task_prerun): a `SELECT 1` on
the live connection, Django's CONN_HEALTH_CHECKS. This prints, in microseconds:

- the check on a live connection (what every task pays), next to the trivial query it is and
  to a task's first real query (a primary-key read of a missing row in a table of its own);
- a task's start after `pg_terminate_backend` cut its connection: the failed check, the close
  and the new connection its first query opens (what a task pays once after a cut, where
  before every task of the process failed until the worker restarted).

Reads nothing of ToolHub's tables: only DATABASE_URL's server is needed (PostgreSQL).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings_test")


def _micros(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return statistics.median(ordered) * 1e6, p90 * 1e6, ordered[0] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--cuts", type=int, default=30)
    args = parser.parse_args()

    import django

    django.setup()
    import psycopg
    from django.db import connection

    from toolhub import dbretry

    if connection.vendor != "postgresql":
        sys.exit("bench/db_health_check.py: needs a PostgreSQL DATABASE_URL")
    # As toolhub.celery sets them in a worker.
    connection.settings_dict["CONN_MAX_AGE"] = None
    connection.settings_dict["CONN_HEALTH_CHECKS"] = True
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE bench_rows (id bigint PRIMARY KEY, body text)")

    def timed(fn) -> list[float]:
        samples = []
        for _ in range(args.calls):
            began = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - began)
        return samples

    def select_one() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()

    def first_query() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT body FROM bench_rows WHERE id = %s", [42])
            cursor.fetchone()

    rows = [
        ("nothing (the loop itself)", timed(lambda: None)),
        ("health check, live connection", timed(dbretry.drop_dead_connections)),
        ("SELECT 1 (what the check runs)", timed(select_one)),
        ("a task's first query (primary-key read)", timed(first_query)),
    ]

    s = connection.settings_dict
    killer = psycopg.connect(dbname=s["NAME"], user=s["USER"] or None, password=s["PASSWORD"] or None,
                             host=s["HOST"] or None, port=s["PORT"] or None, autocommit=True)
    after_cut = []
    for _ in range(args.cuts):
        connection.ensure_connection()
        pid = connection.connection.info.backend_pid
        killer.execute("SELECT pg_terminate_backend(%s)", [pid])
        time.sleep(0.02)
        began = time.perf_counter()
        dbretry.drop_dead_connections()
        select_one()
        after_cut.append(time.perf_counter() - began)
    killer.close()
    rows.append(("after a cut: check, reconnect, SELECT 1", after_cut))

    print(f"{'per task start':<44} {'p50 µs':>9} {'p90 µs':>9} {'min µs':>9} {'n':>6}")
    for label, samples in rows:
        p50, p90, low = _micros(samples)
        print(f"{label:<44} {p50:>9.1f} {p90:>9.1f} {low:>9.1f} {len(samples):>6}")


if __name__ == "__main__":
    main()
