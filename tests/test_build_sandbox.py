"""A package's build code runs only in the build sandbox, as the build user, and only once an
admin allowed its source build: it cannot read the settings file, the database, other toolkits'
environments or /etc/shadow, nor reach anything but the index.

The hostile package is real: `nice-lib` (a wheel) depends on `evil-dep`, which exists only as a
source distribution whose build backend reports, from every hook pip and uv call (dependencies,
metadata, the wheel build), which uid it runs as and whether it can read the settings file, the
data directory, the environments of other toolkits and /etc/shadow. Its reports go to the
test's receiver (tests/env_fixtures.py `Reports`), which takes the sender's host uid from the
kernel. The bait is world-readable, so only the build sandbox can keep it out of reach: the
same probes run as the build user outside the sandbox read it (checked first).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.server
import json
import os
import pwd
import secrets
import shutil
import subprocess
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from tests.conftest import toolkit_source
from tests.env_fixtures import (
    build_sdist,
    build_wheel,
    readable_by_others,
    reports_to,
    source_wheelhouse,
    traversable,
    write_project,
)
from tests.live_fixtures import free_port
from toolhub.packages.environments import environment_ensure, environments_root
from toolhub.packages.models import Approval, Decision, Package, PackageRequest
from toolhub.toolkits.models import Revision, Status

DECIDE = "/packages/decide/"
HOOKS = {"get_requires_for_build_wheel", "prepare_metadata_for_build_wheel", "build_wheel"}


class HostileIndex:
    def __init__(self, directory: Path, bait: dict[str, str]) -> None:
        self.wheelhouse = directory / "wheelhouse"
        self.record = directory / "reports.jsonl"
        self.bait = bait

    def reports(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


def _database_address() -> str:
    database = connection.settings_dict
    return f"tcp:{database['HOST']}:{database['PORT'] or 5432}" if database["HOST"] else ""


@pytest.fixture(scope="module")
def bait() -> dict[str, str]:
    """World-readable things in the data directory a build must not see: a settings file
    with a secret, a directory anyone may list, another environment; and the database's port
    (the builds here are offline, so they have no network). Removed afterwards."""
    data = Path(django_settings.DATA_DIR)
    env_file = data / "toolhub.env"
    assert not env_file.exists(), f"{env_file} exists; this test writes its own"
    listable = data / f"bait-{secrets.token_hex(4)}"
    other_environment = environments_root() / f"bait-{secrets.token_hex(4)}"
    for directory in (listable, other_environment):
        directory.mkdir(mode=0o755)
        directory.chmod(0o755)
    env_file.write_text(f"SECRET_KEY={secrets.token_urlsafe(30)}\n")
    env_file.chmod(0o644)
    found = {"env_file": env_file, "data_dir_entry": listable, "other_environment": other_environment,
             "shadow": "/etc/shadow", "database": _database_address()}
    yield {name: str(place) for name, place in found.items() if place}
    env_file.unlink()
    listable.rmdir()
    other_environment.rmdir()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, bait: dict[str, str]) -> HostileIndex:
    directory = tmp_path_factory.mktemp("hostile-index")
    index = HostileIndex(directory, bait)
    index.wheelhouse.mkdir()
    for wheel in source_wheelhouse().glob("*.whl"):
        shutil.copy2(wheel, index.wheelhouse)
    projects = directory / "projects"
    nice = write_project(projects / "nice", {
        "name": "nice-lib", "version": "1.0", "requires": ["evil-dep"],
        "files": {"nice_lib/__init__.py": "from evil_dep import VALUE\n"},
    })
    evil = write_project(projects / "evil", {
        "name": "evil-dep", "version": "1.0",
        "files": {"evil_dep/__init__.py": "VALUE = 'evil'\n"},
        "socket": reports_to(index.record, index.wheelhouse).name,
        "report_hooks": sorted(HOOKS),
        "probes": list(bait.values()),
    })
    build_wheel(nice, index.wheelhouse)
    build_sdist(evil, index.wheelhouse)
    readable_by_others(index.wheelhouse)
    index.record.unlink(missing_ok=True)
    return index


@pytest.fixture
def hostile_links(settings, hostile: HostileIndex) -> HostileIndex:
    settings.TOOLHUB_FIND_LINKS = [str(hostile.wheelhouse)]
    hostile.record.unlink(missing_ok=True)
    return hostile


def _approve(client, admin, name: str, capture, **extra) -> None:
    client.force_login(admin)
    with capture(execute=True):
        response = client.post(DECIDE, {"name": name, "action": "approve", **extra})
    assert response.status_code == 302


def _retry(client, alice, slug: str, capture) -> None:
    client.force_login(alice)
    with capture(execute=True):
        assert client.post(f"/toolkits/{slug}/environment/retry/").status_code == 302


def _revision(toolkit) -> Revision:
    return Revision.objects.filter(toolkit=toolkit).order_by("-number").first()


@pytest.mark.sandbox  # runs as the build user, in the data directory the builds made traversable
def test_the_bait_is_readable_by_the_build_user_outside_the_sandbox(bait):
    # Without this, the probes below failing would prove nothing about the sandbox.
    probe = (
        "import os, socket, sys; open(sys.argv[1]).read(); os.listdir(sys.argv[2]); os.listdir(sys.argv[3]); "
        "_, host, port = (sys.argv[4] or 'tcp:127.0.0.1:0').split(':'); "
        "sys.argv[4] and socket.create_connection((host, int(port)), timeout=5).close(); print('read')"
    )
    done = subprocess.run(
        [django_settings.TOOLHUB_INTERPRETER, "-I", "-c", probe,
         bait["env_file"], bait["data_dir_entry"], bait["other_environment"], bait.get("database", "")],
        user=django_settings.TOOLHUB_BUILD_USER, capture_output=True, text=True, timeout=30,
    )
    assert done.stdout.strip() == "read", done.stderr


@pytest.mark.slow
@pytest.mark.django_db
def test_by_default_the_sdist_never_runs_and_the_failure_says_how_to_allow_it(
    settings, client, admin, alice, upload, hostile_links, inline_tasks, django_capture_on_commit_callbacks
):
    assert settings.TOOLHUB_ONLY_BINARY  # the default
    toolkit = upload(alice, toolkit_source("Nice", "nice-lib"), slug="nice")
    _approve(client, admin, "nice-lib", django_capture_on_commit_callbacks)
    revision = _revision(toolkit)
    assert revision.status == Status.FAILED
    assert revision.status_detail.startswith("No wheel of evil-dep fits, and building from source is off")
    assert "an admin can allow a source build of evil-dep in the package queue" in revision.status_detail
    assert hostile_links.reports() == []
    # evil-dep is in the queue now, asked for by this revision as a dependency.
    request = PackageRequest.objects.get(revision=revision, package__name="evil-dep")
    assert (request.transitive, request.package.status, request.package.source_build) == (True, Approval.PENDING, False)
    client.force_login(admin)
    page = client.get("/packages/").content.decode()
    assert 'data-package="evil-dep"' in page


@pytest.mark.slow
@pytest.mark.django_db
def test_with_transitive_approval_an_unapproved_sdist_never_runs_even_with_an_allowance(
    settings, client, admin, alice, upload, hostile_links, inline_tasks, django_capture_on_commit_callbacks
):
    settings.TOOLHUB_APPROVE_TRANSITIVE = True
    # An allowance on a package that is not approved counts for nothing.
    Package.objects.create(name="evil-dep", status=Approval.PENDING, source_build=True)
    toolkit = upload(alice, toolkit_source("Nice", "nice-lib"), slug="nice")
    _approve(client, admin, "nice-lib", django_capture_on_commit_callbacks)
    revision = _revision(toolkit)
    assert revision.status == Status.FAILED
    assert revision.status_detail.startswith("No wheel of evil-dep fits")
    assert hostile_links.reports() == []
    # A Retry now waits for the admins: evil-dep is pending, and transitive packages count.
    _retry(client, alice, "nice", django_capture_on_commit_callbacks)
    revision.refresh_from_db()
    assert revision.status == Status.AWAITING_APPROVAL
    assert "evil-dep" in revision.status_detail
    assert hostile_links.reports() == []


@pytest.mark.slow
@pytest.mark.django_db
def test_an_allowed_source_build_runs_unprivileged_in_the_sandbox_and_sees_nothing(
    settings, client, admin, alice, upload, hostile_links, inline_tasks, django_capture_on_commit_callbacks,
    django_assert_num_queries,
):
    toolkit = upload(alice, toolkit_source("Nice", "nice-lib"), slug="nice")
    _approve(client, admin, "nice-lib", django_capture_on_commit_callbacks)
    assert hostile_links.reports() == []
    # The admin allows evil-dep's source build in the queue; the author retries.
    _approve(client, admin, "evil-dep", django_capture_on_commit_callbacks, source_build="on")
    assert Decision.objects.filter(package__name="evil-dep", source_build=True).exists()
    _retry(client, alice, "nice", django_capture_on_commit_callbacks)
    revision = _revision(toolkit)
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-3000:])

    reports = hostile_links.reports()
    # Its code ran in the lock (pip-compile) and in the install (uv), and only there.
    assert {report["hook"] for report in reports} == HOOKS, reports
    build_uid = pwd.getpwnam(settings.TOOLHUB_BUILD_USER).pw_uid
    assert build_uid != 0
    for report in reports:
        assert report["host_uid"] == report["uid"] == build_uid, report
        assert report["probes"] == dict.fromkeys(hostile_links.bait.values(), False), report
        assert not {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "TOOLHUB_ENCRYPTION_KEYS"} & set(report["env"])
    # The environment it built belongs to the worker's account, readable, not writable, by others.
    env = Path(django_settings.TOOLHUB_ENVIRONMENTS_DIR) / revision.environment_key
    installed = next(env.glob("lib/python*/site-packages/evil_dep/__init__.py"))
    for path in (env, installed):
        info = path.stat()
        assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), 0o755 if path.is_dir() else 0o644)
    # Every invocation reuses it; that reads nothing from the database (no allowances).
    with django_assert_num_queries(0):
        assert environment_ensure(lock=revision.lock) == env


@pytest.mark.django_db
def test_without_the_build_user_nothing_is_built_and_the_revision_says_why(
    settings, client, admin, alice, upload, hostile_links, inline_tasks, django_capture_on_commit_callbacks
):
    settings.TOOLHUB_BUILD_USER = "toolhub-no-such-builder"
    toolkit = upload(alice, toolkit_source("Nice", "nice-lib"), slug="nice")
    _approve(client, admin, "nice-lib", django_capture_on_commit_callbacks)
    revision = _revision(toolkit)
    assert revision.status == Status.FAILED
    assert revision.status_detail.startswith("the build sandbox is unavailable: the sandbox user 'toolhub-no-such-builder'")
    assert "$ " not in revision.build_log


@pytest.mark.django_db
def test_the_queue_offers_the_allowance_with_its_warning_and_a_rejection_withdraws_it(
    client, admin, alice, bearer, upload
):
    upload(alice, toolkit_source("Sizes", "humanize"), slug="sizes")
    client.force_login(admin)
    page = client.get("/packages/").content.decode()
    assert '<input type="checkbox" name="source_build" aria-describedby="source-build-warning">' in page
    assert "Its build code will run on the build host, inside the build sandbox." in page
    client.post(DECIDE, {"name": "humanize", "action": "approve", "source_build": "on"})
    assert Package.objects.get(name="humanize").source_build is True
    assert "built from source" in client.get("/packages/?status=approved").content.decode()
    client.post(DECIDE, {"name": "humanize", "action": "reject", "reason": "no", "source_build": "on"})
    assert Package.objects.get(name="humanize").source_build is False
    # The API: approving without the flag withdraws it too; with it, the package says so.
    response = client.post("/api/v1/packages/humanize/approve", {"source_build": True},
                           content_type="application/json", **bearer(admin))
    assert (response.status_code, response.json()["source_build"]) == (200, True)
    response = client.post("/api/v1/packages/humanize/approve", {}, content_type="application/json", **bearer(admin))
    assert response.json()["source_build"] is False
    assert list(Decision.objects.filter(package__name="humanize").values_list("source_build", flat=True)) == [
        False, True, False, True,
    ]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def _http_server(directory: Path) -> Iterator[int]:
    """A plain HTTP server on this host's loopback, serving directory listings (a find-links page)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), functools.partial(_Quiet, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def remote_index(settings, tmp_path: Path, bait: dict[str, str]) -> Iterator[tuple[HostileIndex, int, int]]:
    """nice-net (a wheel) and evil-net (only an sdist) on an index the builds reach by HTTP,
    on this host's loopback; a second HTTP server on loopback that is not an index. evil-net's
    build code probes the database, both servers directly, and both through the proxy."""
    traversable(tmp_path)
    # A path of its own each time: the download caches outlive the test and key files by URL.
    token = secrets.token_hex(4)
    with _http_server(tmp_path) as index_port, _http_server(tmp_path) as other_port:
        index = HostileIndex(tmp_path / token, bait)
        index.wheelhouse.mkdir(parents=True)
        for wheel in source_wheelhouse().glob("*.whl"):
            shutil.copy2(wheel, index.wheelhouse)
        # The receiver's socket is in a local find-links directory the sandbox sees (and that
        # holds no package).
        channel = reports_to(index.record, tmp_path / "channel")
        probes = [
            *bait.values(),
            f"tcp:127.0.0.1:{index_port}", f"tcp:127.0.0.1:{other_port}",
            f"http://127.0.0.1:{index_port}/", f"http://127.0.0.1:{other_port}/",
        ]
        nice = write_project(tmp_path / "projects" / "nice", {
            "name": "nice-net", "version": "1.0", "requires": ["evil-net"],
            "files": {"nice_net/__init__.py": "from evil_net import VALUE\n"},
        })
        evil = write_project(tmp_path / "projects" / "evil", {
            "name": "evil-net", "version": "1.0", "files": {"evil_net/__init__.py": "VALUE = 'evil'\n"},
            "socket": channel.name, "report_hooks": sorted(HOOKS), "probes": probes,
        })
        build_wheel(nice, index.wheelhouse)
        build_sdist(evil, index.wheelhouse)
        readable_by_others(index.wheelhouse)
        readable_by_others(tmp_path / "channel")
        settings.TOOLHUB_FIND_LINKS = [f"http://127.0.0.1:{index_port}/{token}/wheelhouse/", str(tmp_path / "channel")]
        index.record.unlink(missing_ok=True)
        yield index, index_port, other_port


@pytest.mark.slow
@pytest.mark.django_db
def test_an_allowed_source_build_with_a_remote_index_reaches_the_index_and_nothing_else(
    client, admin, alice, upload, remote_index, inline_tasks, django_capture_on_commit_callbacks,
):
    index, index_port, other_port = remote_index
    toolkit = upload(alice, toolkit_source("Nice", "nice-net"), slug="nice_net")
    _approve(client, admin, "nice-net", django_capture_on_commit_callbacks)
    _approve(client, admin, "evil-net", django_capture_on_commit_callbacks, source_build="on")
    _retry(client, alice, "nice_net", django_capture_on_commit_callbacks)
    revision = _revision(toolkit)
    # The lock and the install got every package from the HTTP index on loopback.
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-3000:])

    reports = index.reports()
    assert {report["hook"] for report in reports} == HOOKS, reports
    for report in reports:
        # Only the index, and only through the proxy: not the database, not the other server
        # on the same loopback, not even the index's own port directly.
        reached = {probe for probe, ok in report["probes"].items() if ok}
        assert reached == {f"http://127.0.0.1:{index_port}/"}, report
    assert f"egress refused: 127.0.0.1:{other_port} is not one of the hosts allowed here" in revision.build_log


@pytest.mark.slow
@pytest.mark.django_db
def test_a_build_that_reaches_the_download_limit_fails_naming_the_limit(
    client, admin, alice, upload, remote_index, inline_tasks, django_capture_on_commit_callbacks, settings,
):
    # pydantic-core's wheel alone is larger than this.
    settings.TOOLHUB_BUILD_MAX_DOWNLOAD_BYTES = 1024 * 1024
    toolkit = upload(alice, toolkit_source("Nice", "nice-net"), slug="nice_net")
    _approve(client, admin, "nice-net", django_capture_on_commit_callbacks)
    _approve(client, admin, "evil-net", django_capture_on_commit_callbacks, source_build="on")
    _retry(client, alice, "nice_net", django_capture_on_commit_callbacks)

    revision = _revision(toolkit)
    assert revision.status == Status.FAILED, revision.status
    assert revision.status_detail.endswith("stopped at the build's download limit of 1 MiB"), (
        revision.status_detail, revision.build_log[-3000:],
    )
    assert "egress refused: byte limit reached (1048576 bytes per invocation)" in revision.build_log


# A lock of 100+ packages (the `azure` meta-package locks 108): uv downloads them through the
# build's egress forwarder, which keeps at most 64 connections open.
BULK = 110


def _bulk_wheel(directory: Path, name: str, requires: list[str]) -> None:
    """A pure-Python wheel written directly (building 110 projects would take minutes)."""
    module = name.replace("-", "_")
    info = f"{module}-1.0.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{module}/__init__.py": f"NAME = {name!r}\n".encode(),
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: toolhub-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(directory / f"{module}-1.0-py3-none-any.whl", "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)


class _SlowWheels(_Quiet):
    """Serves uv's wheel downloads slowly, counting the requests in flight at once."""

    guard = threading.Lock()
    in_flight = 0
    most = 0

    def do_GET(self) -> None:
        slow = self.path.endswith(".whl") and self.headers.get("User-Agent", "").startswith("uv/")
        cls = type(self)
        with cls.guard:
            cls.in_flight += 1
            cls.most = max(cls.most, cls.in_flight) if slow else cls.most
        try:
            if slow:
                time.sleep(0.3)
            super().do_GET()
        finally:
            with cls.guard:
                cls.in_flight -= 1


@pytest.mark.slow
@pytest.mark.django_db
def test_a_lock_of_over_a_hundred_packages_installs_through_the_build_proxy_a_few_at_a_time(
    client, admin, alice, upload, settings, tmp_path, inline_tasks, django_capture_on_commit_callbacks,
):
    traversable(tmp_path)
    token = secrets.token_hex(4)
    wheelhouse = tmp_path / token / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    for wheel in source_wheelhouse().glob("*.whl"):
        shutil.copy2(wheel, wheelhouse)
    leaves = [f"bulk-leaf-{n:03d}" for n in range(BULK - 1)]
    for leaf in leaves:
        _bulk_wheel(wheelhouse, leaf, [])
    _bulk_wheel(wheelhouse, "bulk-root", leaves)
    readable_by_others(wheelhouse)
    handler = type("Counting", (_SlowWheels,), {"guard": threading.Lock(), "in_flight": 0, "most": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), functools.partial(handler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.TOOLHUB_FIND_LINKS = [f"http://127.0.0.1:{server.server_address[1]}/{token}/wheelhouse/"]
        toolkit = upload(alice, toolkit_source("Bulk", "bulk-root"), slug="bulk")
        _approve(client, admin, "bulk-root", django_capture_on_commit_callbacks)
        revision = _revision(toolkit)
        if revision.status != Status.READY:
            _retry(client, alice, "bulk", django_capture_on_commit_callbacks)
            revision = _revision(toolkit)
    finally:
        server.shutdown()
        server.server_close()

    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-3000:])
    assert sum(f"bulk-leaf-{n:03d}==1.0" in revision.lock for n in range(BULK - 1)) == BULK - 1
    # uv fetched them TOOLHUB_BUILD_CONCURRENT_DOWNLOADS at a time, not its own default of 50.
    # (One more can be counted: uv sends its next request once it has read a whole answer, a
    # moment before the server's thread counts that answer done.)
    assert 1 < handler.most <= settings.TOOLHUB_BUILD_CONCURRENT_DOWNLOADS + 1, handler.most
    assert "egress refused" not in revision.build_log
