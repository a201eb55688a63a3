"""Several worker hosts against one database and one broker (docs/deploying.md, "Several
machines"): each host has its own data directory and builds a toolkit's environment from the
stored lock on its first call, so a toolkit built on one host is served by another; a host that
cannot build an environment (its wheelhouse lacks the locked files) fails its calls with a
reason that names the host, while another host goes on serving. Real Celery worker processes,
each with a data directory and a host name of its own, on the test database and broker."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import purge_queues, start_worker, toolkit_source
from toolhub.runs import services as run_services
from toolhub.runs.models import FINISHED, Invocation, RunStatus
from toolhub.toolkits.models import Revision, Status

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def hosts_root():
    # Under /tmp and traversable, as a data directory must be for the build and sandbox users.
    root = Path(tempfile.mkdtemp(prefix="toolhub-hosts-", dir="/tmp"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _host(root: Path, logs: Path, name: str, **env: str):
    data = root / name
    data.mkdir(mode=0o711)
    return start_worker(logs, queues=("builds", "sandbox"), name=name, purge=False,
                        env={"TOOLHUB_DATA_DIR": str(data), "TOOLHUB_HOST_NAME": name, **env})


def _environments(root: Path, name: str) -> list[str]:
    folder = root / name / "environments"
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []


def _finished(invocations: list[Invocation], timeout: float = 180) -> list[Invocation]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = list(Invocation.objects.filter(pk__in=[i.pk for i in invocations]))
        if all(row.status in FINISHED for row in rows):
            return rows
        time.sleep(0.2)
    raise AssertionError(f"not finished in {timeout} s: {[(r.pk, r.status) for r in rows]}")


@pytest.mark.worker
@pytest.mark.sandbox
def test_a_toolkit_built_on_one_host_is_served_by_another_and_a_host_that_cannot_build_names_itself(
    upload, alice, hosts_root, tmp_path
):
    purge_queues()
    empty_wheelhouse = hosts_root / "empty-wheelhouse"
    empty_wheelhouse.mkdir(mode=0o755)

    first = _host(hosts_root, tmp_path, "host-a")
    try:
        toolkit = upload(alice, toolkit_source("Two Hosts"))
        revision = toolkit.latest_revision()
        deadline = time.monotonic() + 300
        while Revision.objects.get(pk=revision.pk).status not in (Status.READY, Status.FAILED):
            assert time.monotonic() < deadline, "the build did not end"
            time.sleep(0.2)
    finally:
        first.kill()
    revision.refresh_from_db()
    assert revision.status == Status.READY, revision.status_detail
    toolkit.refresh_from_db()
    built = _environments(hosts_root, "host-a")
    assert len(built) == 1

    def call() -> Invocation:
        return run_services.invocation_create(toolkit=toolkit, tool="echo", arguments={"text": "hi"}, user=alice)

    # A host without the locked files: its calls fail, naming it and the build's reason.
    broken = _host(hosts_root, tmp_path, "host-c", TOOLHUB_FIND_LINKS=str(empty_wheelhouse), TOOLHUB_NO_INDEX="1")
    served = None
    try:
        [failed] = _finished([call()])
        assert failed.status == RunStatus.FAILED
        assert failed.error.startswith("The toolkit's environment could not be built on host-c: "), failed.error
        assert _environments(hosts_root, "host-c") == []

        # Another host joins while the broken one still runs: it builds from the stored lock
        # and serves; every call is served by one or failed by the other, naming it.
        served = _host(hosts_root, tmp_path, "host-b")
        rows = _finished([call() for _ in range(6)])
    finally:
        broken.kill()
        if served is not None:
            served.kill()
    outcomes = {(row.status, row.result if row.status == RunStatus.SUCCEEDED else row.error.split(":")[0]) for row in rows}
    assert outcomes <= {(RunStatus.SUCCEEDED, "hi"), (RunStatus.FAILED, "The toolkit's environment could not be built on host-c")}
    assert (RunStatus.SUCCEEDED, "hi") in outcomes
    assert _environments(hosts_root, "host-b") == built
