"""The web process keeps its PostgreSQL connections in a pool (TOOLHUB_DB_POOL, turned on by
toolhub/asgi.py and wsgi.py); a Celery worker, which forks, connects without one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.db import connection

from tests.conftest import REPO, _database_url

# Run in a process of its own, as the web server or the worker would start: the pool is decided
# when the settings load.
WEB = """
import json
import toolhub.asgi
from django.db import connection

pids = []
for _ in range(5):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pids.append(cursor.fetchone()[0])
    connection.close()  # what the end of each request does
print(json.dumps({"pool": bool(connection.settings_dict["OPTIONS"].get("pool")), "backends": len(set(pids))}))
"""

WORKER = """
import json
import django
django.setup()
from celery.signals import worker_init
from django.db import connection
from toolhub.celery import app

worker_init.send(sender=None)
with connection.cursor() as cursor:
    cursor.execute("SELECT 1")
print(json.dumps({"pool": bool(connection.settings_dict["OPTIONS"].get("pool")), "pooled": connection.pool is not None}))
"""


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's (CI sets DATABASE_URL)")


def _run(code: str, **env: str) -> dict:
    environment = dict(os.environ, DATABASE_URL=_database_url(), DJANGO_SETTINGS_MODULE="toolhub.settings_test", **env)
    environment.pop("TOOLHUB_DB_POOL", None)
    environment.update(env)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=environment, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.django_db(transaction=True)
def test_the_web_server_reuses_its_connections_from_request_to_request(postgres):
    answer = _run(WEB)
    # The pool may open a second connection while it fills up to its minimum in the background.
    assert answer["pool"] and answer["backends"] <= 2, answer


@pytest.mark.django_db(transaction=True)
def test_the_pool_can_be_turned_off(postgres):
    assert _run(WEB, TOOLHUB_DB_POOL="0") == {"pool": False, "backends": 5}


@pytest.mark.django_db(transaction=True)
def test_a_worker_connects_without_the_pool_even_when_it_is_set(postgres):
    # Celery's prefork pool forks the worker: a pool's connections and threads would not survive.
    assert _run(WORKER, TOOLHUB_DB_POOL="1") == {"pool": False, "pooled": False}


REFUSED = """
import django
django.setup()
from django.test import Client

response = Client().get("/api/v1/toolkits", HTTP_AUTHORIZATION="Bearer nothing")
print(json.dumps({"status": response.status_code, "retry_after": response.get("Retry-After")}))
"""


def test_a_pool_that_cannot_connect_gets_503_not_500():
    # As tests/test_faults.py's refused connections, through the pool: it gives up after its
    # timeout and the request answers 503 as it would without one.
    environment = dict(
        os.environ, DATABASE_URL="postgres://postgres@127.0.0.1:1/toolhub", TOOLHUB_DB_POOL="1",
        TOOLHUB_DB_POOL_TIMEOUT="0.5", DJANGO_SETTINGS_MODULE="toolhub.settings_test",
    )
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + REFUSED], cwd=REPO, env=environment, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": 503, "retry_after": "1"}
