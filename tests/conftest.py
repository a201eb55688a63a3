"""Shared fixtures. The people in the tests:

- admin: staff, may do everything.
- alice: a toolkit author; owns the toolkits the tests create.
- bob: another toolkit author; owns nothing of alice's.
- carol: a plain user: may view and invoke, not upload.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# The fixture modules' own asserts get pytest's messages too; registered before anything
# imports them.
pytest.register_assert_rewrite("tests.env_fixtures", "tests.index_fixtures", "tests.sandbox_fixtures", "tests.egress_fixtures", "tests.model_server")

from tests.env_fixtures import demo_index, slow_gate  # noqa: E402,F401
from tests.helpers import bearer_headers  # noqa: E402
from tests.index_fixtures import local_index  # noqa: E402,F401
from tests.model_server import model_server  # noqa: E402,F401

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # Package builds run as the build user in bubblewrap, which must be able to traverse the
    # directories above what it is given. pytest's /tmp/pytest-of-<user> is 0700, and every
    # session that starts on the machine makes it 0700 again, so this session's temporary
    # directories get a root of their own: traversable (0711), not listable.
    if config.option.basetemp is None:
        base = tempfile.mkdtemp(prefix="toolhub-pytest-")
        os.chmod(base, 0o711)
        config.option.basetemp = base
        config.stash[_OWN_BASETEMP] = base


def pytest_unconfigure(config: pytest.Config) -> None:
    base = config.stash.get(_OWN_BASETEMP, None)
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


_OWN_BASETEMP = pytest.StashKey[str]()

EXAMPLES = REPO / "toolhub" / "toolkits" / "demo"


def example(name: str) -> str:
    return (EXAMPLES / f"{name}.py").read_text()


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_user("admin", "admin@example.org", "pw-admin-1", is_staff=True, is_superuser=True)


def _author(django_user_model, name):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user(name, f"{name}@example.org", f"pw-{name}-1")
    user.user_permissions.add(Permission.objects.get(codename="add_toolkit"))
    return user


@pytest.fixture
def alice(django_user_model):
    return _author(django_user_model, "alice")


@pytest.fixture
def bob(django_user_model):
    return _author(django_user_model, "bob")


@pytest.fixture
def carol(django_user_model):
    return django_user_model.objects.create_user("carol", "carol@example.org", "pw-carol-1")


@pytest.fixture
def upload():
    """Upload a source as a user through the service layer (no build runs)."""
    from toolhub.toolkits import services

    def _upload(user, source: str, slug: str | None = None):
        return services.toolkit_create(source=source, user=user, slug=slug).toolkit

    return _upload


@pytest.fixture
def build():
    """Run a revision's build and introspection in this process, the way the worker would:
    real pip-compile, uv, and bubblewrap sandbox, without a broker in between. With a live
    worker running, it may take a step first (each step is claimed once): then its end is
    waited for."""
    from toolhub.toolkits.models import Revision, Status, Toolkit
    from toolhub.toolkits.tasks import build_revision, introspect_revision

    def _build(toolkit):
        revision = toolkit.latest_revision()
        build_revision.run(revision.pk)
        introspect_revision.run(revision.pk)
        deadline = time.monotonic() + 180
        while Revision.objects.filter(pk=revision.pk, status=Status.BUILDING).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return Toolkit.objects.get(pk=toolkit.pk)

    return _build


def _database_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] or ""
    if s["PASSWORD"]:
        auth += f":{s['PASSWORD']}"
    host = s["HOST"] or ""
    port = f":{s['PORT']}" if s["PORT"] else ""
    return f"postgres://{auth}{'@' if auth or host else ''}{host}{port}/{s['NAME']}"


class WorkerProcess:
    def __init__(self, process: subprocess.Popen, log: Path):
        self.process = process
        self.log = log

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        # What its sandboxes left running goes, as the next worker's start would see to
        # (toolhub.sandbox.uids: bubblewrap does not always go with a killed worker).
        from toolhub.toolkits.sandboxing import uid_pool

        pool = uid_pool()
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.sweep()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


QUEUES = ("builds", "sandbox", "maintenance", "celery")


def purge_queues() -> None:
    """Drop every message waiting on the worker's queues (`app.control.purge()` only empties
    the queues this process consumes from, i.e. none of them)."""
    from toolhub.celery import app

    with app.connection_for_write() as connection:
        for queue in QUEUES:
            connection.default_channel.queue_purge(queue)


def start_worker(
    tmp_path: Path, *, concurrency: int = 1, queues: tuple[str, ...] = QUEUES, beat: bool = False,
    env: dict[str, str] | None = None, name: str = "worker", purge: bool = True,
) -> WorkerProcess:
    """A real Celery worker process on the configured broker (or `env`'s REDIS_URL), using the
    test database; with `beat`, celery beat runs in it too (the reapers' schedule)."""
    if purge:
        purge_queues()
    env = dict(os.environ, DATABASE_URL=_database_url(), **(env or {}))
    log = tmp_path / f"{name}.log"
    extra = ["-B", "-s", str(tmp_path / f"{name}-beat-schedule")] if beat else []
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "toolhub", "worker", "-Q", ",".join(queues), "-n", f"{name}@%h",
         "-c", str(concurrency), "-l", "info", "--without-heartbeat", "--without-gossip", "--without-mingle", *extra],
        cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    worker = WorkerProcess(process, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "ready." in worker.output():
            return worker
        if process.poll() is not None:
            break
        time.sleep(0.2)
    worker.kill()
    raise RuntimeError("the Celery worker did not start:\n" + worker.output()[-3000:])


@pytest.fixture
def worker(transactional_db, tmp_path):
    proc = start_worker(tmp_path)
    yield proc
    proc.kill()


# ------------------------------------------------------------------------------------------
# Package approval and build fixtures (added for tests/test_package_queue.py and
# tests/test_builds.py).


def toolkit_source(title: str, requirements: str = "", *, version: str = "0.1.0") -> str:
    """A small valid toolkit whose frontmatter asks for `requirements` (comma-separated)."""
    requirement_line = f"requirements: {requirements}\n" if requirements else ""
    return (
        f'"""\ntitle: {title}\nauthor: tests\ndescription: A toolkit the tests made.\nversion: {version}\n'
        f'{requirement_line}"""\n\n\n'
        "class Tools:\n"
        "    def echo(self, text: str) -> str:\n"
        '        """\n        Return the text unchanged.\n        :param text: Any text\n        """\n'
        "        return text\n"
    )


@pytest.fixture
def bearer():
    """Authorization headers for the API, with a fresh token of the given user."""
    return bearer_headers


@pytest.fixture
def inline_tasks(monkeypatch):
    """Run the build and introspection tasks in this process when they are queued.

    Combine with `django_capture_on_commit_callbacks(execute=True)`: the services queue
    tasks with transaction.on_commit, so this also shows that nothing is queued before the
    transaction commits. Every queued task id is recorded in the returned list."""
    from django.db import transaction

    from toolhub.toolkits import lifecycle
    from toolhub.toolkits.tasks import build_revision, introspect_revision

    queued: list[tuple[str, int]] = []
    tasks = {task.name: task for task in (build_revision, introspect_revision)}

    def enqueue(task_name: str, revision_id: int) -> None:
        task = tasks[task_name]

        def run() -> None:
            queued.append((task_name.rsplit(".", 1)[-1], revision_id))
            task.run(revision_id)

        transaction.on_commit(run)

    monkeypatch.setattr(lifecycle, "enqueue", enqueue)
    return queued


@pytest.fixture(autouse=True)
def _english_by_default():
    """A request leaves its language active on the thread; start every test in English."""
    from django.utils import translation

    with translation.override("en"):
        yield


@pytest.fixture(autouse=True)
def _no_warm_sandbox_outlives_its_test():
    """A test that ran tool calls in this process (inline tasks) leaves the process's warm pool
    with idle sandboxes, each holding a sandbox uid, its processes alive, for up to
    TOOLHUB_SANDBOX_WARM_IDLE_SECONDS: later tests found those uids busy, and the checks that no
    sandbox process survives a test saw them. The pool goes with the test that made it."""
    yield
    from toolhub.toolkits import sandboxing

    held, sandboxing._warm = sandboxing._warm, None
    if held is not None:
        held[1].close()


_NEEDS = ("database", "worker", "sandbox", "browser")
_DATABASE_FIXTURES = {"db", "transactional_db", "django_db_setup", "live_server", "admin", "alice", "bob", "carol"}
_WORKER_FIXTURES = {"worker", "slow_worker"}
# Fixtures that build environments or run code in bubblewrap.
_SANDBOX_FIXTURES = {"sandbox_env", "sandbox_runtime", "build", "inline_tasks"}


# What the whole host shares: sandboxes (the uid pool, and the checks that no sandbox process
# survives a test), Celery workers, injected faults, Redis-wide commands (`host`). `make test`
# (scripts/run_tests.py) runs the tests that use any of it one after another in two pytest
# processes, each with a uid range of its own, and the rest in a third beside them.
_HOST_WIDE = ("sandbox", "worker", "fault", "host")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark every test with what it needs (see the markers in pyproject.toml), as it is
    collected (before `-m` selects)."""
    names = set(getattr(item, "fixturenames", ()))
    if names & _DATABASE_FIXTURES or item.get_closest_marker("django_db"):
        item.add_marker(pytest.mark.database)
    if names & _WORKER_FIXTURES:
        item.add_marker(pytest.mark.worker)
    if names & (_WORKER_FIXTURES | _SANDBOX_FIXTURES):
        item.add_marker(pytest.mark.sandbox)
    if not any(item.get_closest_marker(need) for need in _NEEDS):
        item.add_marker(pytest.mark.plain)


def needed_marker(argv: object) -> str | None:
    """The marker a test must carry to start this process: `sandbox` for bubblewrap (a sandbox,
    a build), `worker` for a Celery worker; None for anything else."""
    words = [os.fsdecode(word) for word in argv] if isinstance(argv, (list, tuple)) else str(argv).split()
    names = [os.path.basename(word) for word in words[:1]]
    if names == ["bwrap"]:
        return "sandbox"
    if "celery" in words[:4] and "worker" in words:
        return "worker"
    return None


class _Overreach:
    """What the running test started that its markers do not say (see pytest_collection_
    modifyitems): read from Python's audit events, so it sees every process this test process
    starts, however deep in ToolHub the start is."""

    item: pytest.Item | None = None
    found: list[str] = []

    @classmethod
    def hook(cls, event: str, args: tuple) -> None:
        if event != "subprocess.Popen" or cls.item is None:
            return
        marker = needed_marker(args[1])
        if marker is not None and cls.item.get_closest_marker(marker) is None:
            cls.found.append(f"started {os.path.basename(os.fsdecode(args[0]))} without the `{marker}` marker")


sys.addaudithook(_Overreach.hook)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _Overreach.item, _Overreach.found = item, []


@pytest.hookimpl(trylast=True)  # after the test's fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    found, _Overreach.item, _Overreach.found = _Overreach.found, None, []
    if found:
        pytest.fail(
            f"{item.nodeid} needs more than its markers say ({'; '.join(sorted(set(found)))}): "
            "use the fixture that brings it (tests/conftest.py) or mark it, so that it runs where "
            "such tests run (scripts/run_tests.py)", pytrace=False,
        )
