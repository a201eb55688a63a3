"""A worker with warm sandboxes runs a toolkit with an egress grant warm too (issue "Sandbox v2"):
the worker's task (`run_invocation`) in this process with TOOLHUB_SANDBOX_WARM=1, a toolkit
uploaded and built for real, the real proxy, and the private test network of
tests/egress_fixtures.py as the host it may reach.

A second call reuses the warm sandbox and its proxy; each invocation's `egress` report is its
own; a changed, held or withdrawn grant never gets the sandbox (and proxy) of the old one.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import start_worker
from tests.egress.test_tools import PROBE, grant, run
from tests.egress_fixtures import TestNetwork, test_network_fixture  # noqa: F401 - the fixture
from tests.helpers import bearer_headers
from tests.sandbox_fixtures import require_sandbox, wait_for_no_sandbox_processes
from tests.test_invocations import _sandbox_lines, wait_until
from toolhub.runs.models import Invocation, RunStatus
from toolhub.runs.warming import warm_from_history
from toolhub.sandbox.warm import WarmSandbox
from toolhub.toolkits import sandboxing
from toolhub.toolkits.models import Status, Toolkit
from toolhub.toolkits.services import toolkit_set_egress

pytestmark = [pytest.mark.sandbox, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def warm_here(settings):
    """This process's warm pool, on for the test and emptied after it."""
    require_sandbox()
    settings.TOOLHUB_SANDBOX_WARM = 1
    yield
    pool = sandboxing.warm_pool()
    if pool is not None:
        pool.close()
    sandboxing._warm = None
    assert wait_for_no_sandbox_processes() == []


@pytest.fixture
def probe(upload, build, admin, test_network: TestNetwork, warm_here):
    toolkit = build(upload(admin, PROBE.replace("@CA_PEM@", test_network.ca_pem), slug="egress_warm_probe"))
    assert toolkit.current_revision.status == Status.READY, toolkit.current_revision.status_detail
    return toolkit


def _token() -> str:
    return f"/t-{uuid.uuid4().hex}"


def _idle() -> list[WarmSandbox]:
    pool = sandboxing.warm_pool()
    assert pool is not None
    return pool.idle()


def _granted_sandbox() -> WarmSandbox:
    [sandbox] = [sandbox for sandbox in _idle() if sandbox.egress is not None]
    return sandbox


def test_a_granted_toolkits_second_call_reuses_the_warm_sandbox_and_reaches_its_host(probe, admin, test_network):
    grant(probe, admin, [])
    first_path, second_path = _token(), _token()

    first, _ = run(probe, "fetch", admin, url=test_network.url(first_path))
    sandbox = _granted_sandbox()
    forkserver = sandbox.process.pid
    second, _ = run(probe, "fetch", admin, url=test_network.url(second_path, tls=True))

    for invocation, path in ((first, first_path), (second, second_path)):
        assert invocation.status == RunStatus.SUCCEEDED, invocation.error
        assert json.loads(invocation.result)["path"] == path
    # The same sandbox (the same fork server) answered both, and it is still warm.
    assert _granted_sandbox() is sandbox and sandbox.process.pid == forkserver and sandbox.calls == 2
    assert sandboxing.warm_pool().started == 1
    # Each invocation's report is its own call's: one connection each, to its own port.
    for invocation, port in ((first, test_network.http_port), (second, test_network.https_port)):
        [host] = invocation.egress["hosts"]
        assert (host["host"], host["port"], host["connections"]) == (test_network.address, port, 1)
        assert invocation.egress["connections"] == 1 and invocation.egress["refused"] == []


def test_a_refused_host_is_refused_on_the_warm_sandbox_and_only_that_call_reports_it(probe, admin, test_network):
    grant(probe, admin, [])

    refused, _ = run(probe, "fetch_all", admin, urls=["http://169.254.169.254/latest/meta-data/"])
    clean, _ = run(probe, "fetch", admin, url=test_network.url(_token()))

    assert refused.status == RunStatus.SUCCEEDED and clean.status == RunStatus.SUCCEEDED, (refused.error, clean.error)
    [outcome] = refused.result
    assert "ToolHub egress refused: 169.254.169.254 is a link-local address" in outcome
    assert [r["host"] for r in refused.egress["refused"]] == ["169.254.169.254"]
    assert clean.egress["refused"] == [] and clean.egress["connections"] == 1
    assert sandboxing.warm_pool().started == 1


def test_a_changed_held_or_withdrawn_grant_never_gets_the_old_sandbox(probe, admin, test_network):
    grant(probe, admin, [])
    run(probe, "fetch", admin, url=test_network.url(_token()))
    old = _granted_sandbox()

    # Other hosts: another warm sandbox, whose proxy applies the new allowlist.
    grant(probe, admin, ["api.example.org"])
    path = _token()
    narrowed, _ = run(probe, "fetch", admin, url=test_network.url(path))
    assert narrowed.status == RunStatus.FAILED and "is not in this toolkit's allowlist (api.example.org)" in narrowed.error
    assert path not in test_network.paths_seen()
    assert sandboxing.warm_pool().started == 2 and old.calls == 1

    # Held (a revision mentions new hosts) and then withdrawn: no proxy, no socket, no network.
    Toolkit.objects.filter(pk=probe.pk).update(egress_held_hosts=["collector.evil.example"])
    held, _ = run(probe, "fetch", admin, url=test_network.url(path))
    toolkit_set_egress(toolkit=Toolkit.objects.get(pk=probe.pk), granted=False, hosts=[], by=admin)
    withdrawn, _ = run(probe, "fetch", admin, url=test_network.url(path))
    for invocation in (held, withdrawn):
        assert invocation.status == RunStatus.FAILED and "this toolkit has no network egress" in invocation.error
        assert invocation.egress is None
    assert path not in test_network.paths_seen()
    [plain] = [sandbox for sandbox in _idle() if sandbox.egress is None]
    assert plain.calls == 2 and sandboxing.warm_pool().started == 3 and old.calls == 1


def test_warming_from_history_warms_the_granted_toolkits_sandbox(probe, admin, test_network):
    grant(probe, admin, [])
    run(probe, "fetch", admin, url=test_network.url(_token()))
    sandboxing.warm_pool().close()
    sandboxing._warm = None

    assert warm_from_history() == 1
    [sandbox] = _idle()
    assert sandbox.egress == sandboxing.egress_policy(Toolkit.objects.get(pk=probe.pk), probe.current_revision)
    assert sandbox.egress is not None
    reached, _ = run(probe, "fetch", admin, url=test_network.url(_token()))
    assert reached.status == RunStatus.SUCCEEDED, reached.error
    assert sandboxing.warm_pool().started == 1 and sandbox.calls == 1

    # Withdrawn since: the start-up check warms the sandbox the next run gets (no proxy).
    toolkit_set_egress(toolkit=Toolkit.objects.get(pk=probe.pk), granted=False, hosts=[], by=admin)
    sandboxing.warm_pool().close()
    sandboxing._warm = None
    assert warm_from_history() == 1
    [sandbox] = _idle()
    assert sandbox.egress is None


@pytest.mark.worker
def test_a_warm_worker_answers_a_granted_toolkits_calls_from_one_sandbox(probe, admin, test_network, client, tmp_path, monkeypatch):
    grant(probe, admin, [])
    monkeypatch.setenv("TOOLHUB_SANDBOX_WARM", "1")
    headers = bearer_headers(admin)
    worker = start_worker(tmp_path)

    def fetch(path: str) -> Invocation:
        response = client.post(
            f"/api/v1/toolkits/{probe.slug}/tools/fetch/invoke",
            json.dumps({"arguments": {"url": test_network.url(path)}, "wait": True}),
            content_type="application/json", **headers,
        )
        body = response.json()
        assert response.status_code == 200 and body["status"] == "succeeded", (body, worker.output()[-3000:])
        assert json.loads(body["result"])["path"] == path
        return Invocation.objects.get(pk=body["id"])

    try:
        first = fetch(_token())
        forkservers = {int(line.split()[0]) for line in _sandbox_lines("forkserver.py")}
        assert len(forkservers) == 1, "one warm sandbox should be idle between the calls"
        second = fetch(_token())
        # The same fork server, the same proxy: each invocation still has its own report.
        assert {int(line.split()[0]) for line in _sandbox_lines("forkserver.py")} == forkservers
        for invocation in (first, second):
            assert invocation.egress["connections"] == 1 and invocation.egress["hosts"][0]["connections"] == 1
    finally:
        worker.kill()
    wait_until(lambda: not _sandbox_lines("forkserver.py"), timeout=10, what="the warm sandbox to go")
