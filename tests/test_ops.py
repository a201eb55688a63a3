"""Health, readiness and metrics (docs/deploying.md, "Health and metrics"): `/healthz` answers
while the process serves, `/readyz` checks a real database, broker and Celery workers and says
why it is not ready, `/metrics` counts the database's rows in Prometheus text for the addresses
or the token it is open to; none of them ever shows a secret."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import start_worker
from tests.helpers import broker_at, ready_string_reverse, reverse_tool
from tests.live_fixtures import start_gunicorn
from toolhub.agents.models import AgentRun, AgentRunStatus
from toolhub.runs.models import Invocation, RunStatus, Surface

METRICS_TOKEN = "metrics-token-for-the-tests-0123456789"
# A password and a broker URL that must never be echoed by any of the three endpoints.
DB_PASSWORD = "db-secret-Xq7Zp"
BROKER_PASSWORD = "broker-secret-Vt93"


def _secrets() -> list[str]:
    return [settings.SECRET_KEY, *settings.TOOLHUB_ENCRYPTION_KEYS.split(","), settings.CELERY_BROKER_URL,
            DB_PASSWORD, BROKER_PASSWORD]


def _assert_no_secret(body: str) -> None:
    for secret in _secrets():
        if secret:
            assert secret not in body


# /healthz
# ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_healthz_answers_ok_to_anyone_without_touching_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_a_wrong_method_is_refused_with_json_and_the_allowed_methods(client, path, method):
    response = getattr(client, method)(path)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert response.json()["errors"][0]["message"].startswith(f"Method {method.upper()} is not allowed")


# /readyz
# ------------------------------------------------------------------------------


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_readyz_is_ok_with_a_live_worker_on_every_queue(client, tmp_path):
    worker = start_worker(tmp_path)
    try:
        response = client.get("/readyz")
    finally:
        worker.kill()
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"] == {"database": "ok", "broker": "ok", "workers": {"sandbox": 1, "builds": 1, "maintenance": 1}}
    assert body["reasons"] == []
    _assert_no_secret(response.content.decode())


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_readyz_counts_workers_per_queue_and_names_the_queue_nobody_serves(client, tmp_path):
    work = start_worker(tmp_path, queues=("sandbox", "builds"), name="work")
    builds = start_worker(tmp_path, queues=("builds",), name="builds", purge=False)
    try:
        response = client.get("/readyz")
    finally:
        work.kill()
        builds.kill()
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["workers"] == {"sandbox": 1, "builds": 2, "maintenance": 0}
    assert body["reasons"] == ["workers: no live worker consumes the maintenance queue"]


@pytest.mark.django_db(transaction=True)
def test_readyz_without_any_worker_is_503_with_a_reason_per_queue(client):
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok" and body["checks"]["broker"] == "ok"
    assert body["checks"]["workers"] == {"sandbox": 0, "builds": 0, "maintenance": 0}
    assert body["reasons"] == [f"workers: no live worker consumes the {q} queue" for q in ("sandbox", "builds", "maintenance")]


@pytest.mark.django_db
def test_readyz_with_the_broker_down_is_503_naming_the_broker_and_not_its_url(client):
    url = f"redis://:{BROKER_PASSWORD}@127.0.0.1:1/0"
    with broker_at(url):
        response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["broker"].startswith("unreachable (")
    assert body["reasons"] == [f"broker: {body['checks']['broker']}"]
    text = response.content.decode()
    assert url not in text and "127.0.0.1:1" not in text
    _assert_no_secret(text)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_server_whose_database_and_broker_are_down_is_alive_but_not_ready(tmp_path):
    """A real web server started against a PostgreSQL port and a Redis port where nothing
    listens, each URL with a password: liveness holds, readiness names both, and neither body
    (nor the metrics' error) shows a password, a URL or a host."""
    database_url = f"postgres://toolhub:{DB_PASSWORD}@127.0.0.1:1/toolhub_gone"
    redis_url = f"redis://:{BROKER_PASSWORD}@127.0.0.1:2/0"
    server = start_gunicorn(tmp_path, env={"DATABASE_URL": database_url, "REDIS_URL": redis_url}, workers=1)
    try:
        status, health = _get(f"{server.url}/healthz")
        assert (status, json.loads(health)) == (200, {"status": "ok"})
        status, ready = _get(f"{server.url}/readyz")
        assert status == 503, ready
        body = json.loads(ready)
        assert body["checks"]["database"] == "unreachable (OperationalError)"
        assert body["checks"]["broker"].startswith("unreachable (")
        assert [reason.split(":")[0] for reason in body["reasons"]] == ["database", "broker"]
        # A scrape that finds the database away is answered like every other such request:
        # 503, to be tried again, and without the database's own words.
        status, scraped = _get(f"{server.url}/metrics")
        assert status == 503
    finally:
        server.stop()
    for text in (health, ready, scraped):
        for leaked in (DB_PASSWORD, BROKER_PASSWORD, database_url, redis_url, "127.0.0.1:1", "toolhub_gone"):
            assert leaked not in text
    # The reasons are in the server's log, for the operator.
    assert "readiness: the database failed" in server.output()


# /metrics
# ------------------------------------------------------------------------------


@pytest.fixture
def toolkit(upload, alice):
    return ready_string_reverse(upload, alice, tools=[reverse_tool({"type": "object", "properties": {}})])


def _invocations(toolkit, user, *, status: str, surface: str, seconds: float | None, count: int) -> None:
    now = timezone.now()
    started = now - timedelta(seconds=seconds) if seconds is not None else None
    Invocation.objects.bulk_create(
        Invocation(
            toolkit=toolkit, revision=toolkit.current_revision, tool="reverse_string", user=user, status=status,
            surface=surface, started_at=started, finished_at=now if seconds is not None else None,
        )
        for _ in range(count)
    )


def _scrape(client, **headers) -> dict:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    _assert_no_secret(response.content.decode())
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.mark.django_db
def test_metrics_count_invocations_durations_builds_and_agent_runs_in_four_queries(
    client, toolkit, alice, carol, django_assert_num_queries
):
    _invocations(toolkit, alice, status=RunStatus.SUCCEEDED, surface=Surface.MCP, seconds=0.02, count=3)
    _invocations(toolkit, carol, status=RunStatus.SUCCEEDED, surface=Surface.MCP, seconds=3.0, count=1)
    _invocations(toolkit, alice, status=RunStatus.FAILED, surface=Surface.OPENAPI, seconds=0.2, count=2)
    _invocations(toolkit, alice, status=RunStatus.QUEUED, surface=Surface.API, seconds=None, count=5)
    _invocations(toolkit, alice, status=RunStatus.RUNNING, surface=Surface.API, seconds=None, count=1)
    revision = toolkit.current_revision
    for status in (AgentRunStatus.SUCCEEDED, AgentRunStatus.SUCCEEDED, AgentRunStatus.QUEUED):
        AgentRun.objects.create(user=alice, connection_name="m", model="m", strategy=toolkit, strategy_revision=revision,
                                query="q", status=status)

    with django_assert_num_queries(4):
        samples = _scrape(client)

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    slug = toolkit.slug
    assert value("toolhub_invocations_total", toolkit=slug, tool="reverse_string", surface="mcp", outcome="succeeded") == 4
    assert value("toolhub_invocations_total", toolkit=slug, tool="reverse_string", surface="openapi", outcome="failed") == 2
    assert value("toolhub_invocations_in_progress", status="queued") == 5
    assert value("toolhub_invocations_in_progress", status="running") == 1
    assert value("toolhub_invocations_in_progress", status="awaiting_input") == 0
    assert value("toolhub_invocation_duration_seconds_bucket", surface="mcp", le="0.025") == 3
    assert value("toolhub_invocation_duration_seconds_bucket", surface="mcp", le="2.5") == 3
    assert value("toolhub_invocation_duration_seconds_bucket", surface="mcp", le="5.0") == 4
    assert value("toolhub_invocation_duration_seconds_bucket", surface="mcp", le="+Inf") == 4
    assert value("toolhub_invocation_duration_seconds_count", surface="openapi") == 2
    assert value("toolhub_invocation_duration_seconds_sum", surface="mcp") == pytest.approx(3.06, abs=0.01)
    assert value("toolhub_revisions", status="ready") == 1
    assert value("toolhub_agent_runs_total", outcome="succeeded") == 2
    assert value("toolhub_agent_runs_in_progress", status="queued") == 1
    assert value("toolhub_broker_up") == 1
    assert value("toolhub_queue_messages", queue="sandbox") >= 0
    assert {("toolhub_queue_messages", (("queue", q),)) for q in ("sandbox", "builds", "maintenance")} <= samples.keys()


@pytest.mark.django_db
def test_metrics_query_count_does_not_grow_with_toolkits_and_invocations(client, upload, alice, django_assert_num_queries):
    for title in ("One", "Two", "Three"):
        kit = upload(alice, example_named(title))
        _invocations(kit, alice, status=RunStatus.SUCCEEDED, surface=Surface.API, seconds=0.1, count=3)
    with django_assert_num_queries(4):
        _scrape(client)


def example_named(title: str) -> str:
    from tests.conftest import toolkit_source

    return toolkit_source(title)


@pytest.mark.django_db
def test_metrics_count_warm_sandboxes_of_this_host_from_the_budget(client, settings, tmp_path):
    from toolhub.sandbox.warm_budget import MemoryBudget

    settings.TOOLHUB_SANDBOX_WARM_MEMORY_MB = 64
    settings.TOOLHUB_SANDBOX_WARM_BUDGET_DIR = str(tmp_path / "budget")
    budget = MemoryBudget(limit_bytes=64 << 20, directory=tmp_path / "budget")
    held = [budget.reserve(10 << 20), budget.reserve(5 << 20)]
    try:
        samples = _scrape(client)
    finally:
        for reservation in held:
            assert reservation is not None
            reservation.release()
    assert samples[("toolhub_warm_sandboxes", ())] == 2
    assert samples[("toolhub_warm_sandbox_memory_bytes", ())] == 15 << 20


@pytest.mark.django_db
def test_metrics_with_the_broker_down_say_so_and_still_count_the_rows(client):
    with broker_at(f"redis://:{BROKER_PASSWORD}@127.0.0.1:1/0"):
        samples = _scrape(client)
    assert samples[("toolhub_broker_up", ())] == 0
    assert not any(name == "toolhub_queue_messages" for name, _ in samples)


@pytest.mark.django_db
def test_metrics_are_refused_to_an_address_outside_the_allowed_networks(client, settings):
    settings.TOOLHUB_METRICS_ALLOW = ["10.0.0.0/8"]
    settings.TOOLHUB_METRICS_TOKEN = ""
    refused = client.get("/metrics")  # the test client is 127.0.0.1
    assert refused.status_code == 403
    assert refused.json()["errors"][0]["message"].startswith("Metrics are not open")
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200


@pytest.mark.django_db
def test_a_malformed_allowed_network_opens_nothing_and_is_logged(client, settings, caplog):
    settings.TOOLHUB_METRICS_ALLOW = ["127.0.0.1/33", "not-an-address", ""]
    settings.TOOLHUB_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 403
    assert "'not-an-address' is not an address or a network" in caplog.text


@pytest.mark.django_db
def test_metrics_token_opens_them_from_anywhere_and_a_wrong_token_does_not(client, settings):
    settings.TOOLHUB_METRICS_ALLOW = []
    settings.TOOLHUB_METRICS_TOKEN = METRICS_TOKEN
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {METRICS_TOKEN}").status_code == 403
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}", REMOTE_ADDR="192.0.2.7")
    assert response.status_code == 200
    assert METRICS_TOKEN not in response.content.decode()
