"""From approval to a ready toolkit, through the Django layer: the build task locks the
requirements with pip-compile, builds (or reuses) the environment with uv, and the sandbox
introspects the toolkit. Builds come from the offline wheelhouse the test settings name.

The people (tests/conftest.py): admin approves; alice owns the toolkits; bob is another
author who owns none of alice's; carol may only view.

Environments live under TOOLHUB_DATA_DIR and outlive a test, as on a real host: the first
test that needs an environment builds it and later tests reuse it. A test that must see a
fresh build uses its own environments root, or a lock nobody built before.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.utils import timezone

from tests.conftest import example, start_worker, toolkit_source
from toolhub import broker, heartbeat
from toolhub.messages import as_written
from toolhub.packages import envbuild as envlib
from toolhub.packages.environments import environments_root
from toolhub.packages.models import Approval, Package
from toolhub.reaper import reap_stale_work
from toolhub.runs.models import Invocation, RunStatus
from toolhub.runs.tasks import run_invocation
from toolhub.toolkits import lifecycle
from toolhub.toolkits import services as toolkit_services
from toolhub.toolkits.models import Revision, Status, Toolkit
from toolhub.toolkits.tasks import build_revision

DECIDE = "/packages/decide/"
INTERRUPTED = "The build was interrupted (its worker stopped); press Retry to build again."


def _approve(client, admin, names, capture, **extra):
    """Approve on the queue page, then run what the decision queued once it commits (with
    `inline_tasks`, the build and the introspection)."""
    client.force_login(admin)
    with capture(execute=True) as callbacks:
        response = client.post(DECIDE, {"name": names, "action": "approve", **extra})
    assert response.status_code == 302
    return callbacks


def _revision(toolkit, number: int | None = None) -> Revision:
    revisions = Revision.objects.filter(toolkit=toolkit)
    return revisions.get(number=number) if number else revisions.order_by("-number").first()


def _toolkit(toolkit) -> Toolkit:
    return Toolkit.objects.select_related("current_revision").get(pk=toolkit.pk)


def _wait_for(predicate, *, timeout: float, what: str, worker=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    tail = worker.output()[-4000:] if worker else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


def _pid_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def _leftovers(root: Path, key: str) -> list[str]:
    return sorted(p.name for p in root.glob(f".tmp-{key}-*"))


@pytest.fixture
def sizes(alice, upload):
    """alice's friendly_sizes demo toolkit (needs humanize>=4)."""
    return upload(alice, example("friendly_sizes"))


@pytest.fixture
def ready_sizes(db, admin, client, sizes, inline_tasks, django_capture_on_commit_callbacks):
    """friendly_sizes approved, built and introspected."""
    _approve(client, admin, "humanize", django_capture_on_commit_callbacks)
    client.logout()
    assert _revision(sizes).status == Status.READY, _revision(sizes).build_log[-3000:]
    return _toolkit(sizes)


@pytest.fixture
def demo_find_links(settings, demo_index):
    """Builds in this process use the demo wheelhouse (tests/env_fixtures.py): the runtime's
    wheels plus tiny made-up packages, some made to fail or to wait."""
    settings.TOOLHUB_FIND_LINKS = [str(demo_index.wheelhouse)]
    return demo_index


# APPROVE → LOCK → BUILD → READY
# ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_upload_waits_for_approval_with_its_package_in_the_queue(client, admin, sizes):
    revision = _revision(sizes)
    assert revision.status == Status.AWAITING_APPROVAL
    assert revision.status_detail == "Waiting for an admin to approve: humanize"
    assert (revision.lock, revision.environment_key) == ("", "")
    client.force_login(admin)
    page = client.get("/packages/")
    [package] = page.context["packages"]
    assert package.name == "humanize"
    assert [(r.revision.toolkit.slug, r.specifier) for r in package.requests.all()] == [("friendly_sizes", ">=4")]


@pytest.mark.slow
@pytest.mark.django_db
def test_approval_locks_builds_and_introspects_until_ready(
    client, admin, alice, sizes, inline_tasks, django_capture_on_commit_callbacks
):
    client.force_login(admin)
    with django_capture_on_commit_callbacks() as callbacks:
        client.post(DECIDE, {"name": "humanize", "action": "approve"})
    # Nothing is queued before the decision commits; then one build.
    assert inline_tasks == []
    assert len(callbacks) == 1
    revision = _revision(sizes)
    assert (revision.status, revision.status_detail) == (Status.BUILDING, "Queued for build")

    with django_capture_on_commit_callbacks(execute=True):
        for callback in callbacks:
            callback()
    assert inline_tasks == [("build_revision", revision.pk), ("introspect_revision", revision.pk)]

    revision.refresh_from_db()
    assert revision.status == Status.READY, revision.build_log[-3000:]
    assert revision.status_detail == ""
    # The lock pins humanize and the runtime's pydantic, with hashes, and names no index.
    assert "humanize==" in revision.lock
    assert "pydantic==2." in revision.lock
    assert "--hash=sha256:" in revision.lock
    assert "--find-links" not in revision.lock and "--index-url" not in revision.lock
    # The environment is keyed by the lock and the interpreter, and complete.
    key = envlib.environment_key(lock=revision.lock, interpreter=django_settings.TOOLHUB_INTERPRETER)
    assert revision.environment_key == key
    env = environments_root() / key
    assert json.loads((env / envlib.MARKER_NAME).read_text())["key"] == key
    assert [info.key for info in envlib.list_environments(environments_root()) if info.key == key] == [key]
    assert list(env.glob("lib/python3.11/site-packages/humanize/__init__.py"))
    assert f"Environment ready: {key}" in revision.build_log
    assert [tool["function"]["name"] for tool in revision.tools] == ["natural_size"]

    toolkit = _toolkit(sizes)
    assert toolkit.current_revision_id == revision.pk
    assert toolkit.status == Status.READY
    client.force_login(alice)
    data = client.get("/api/v1/toolkits/friendly_sizes").json()
    assert (data["status"], data["status_detail"]) == ("ready", None)
    assert [tool["function"]["name"] for tool in data["tools"]] == ["natural_size"]


@pytest.mark.slow
@pytest.mark.django_db
def test_a_toolkit_with_the_same_requirements_reuses_the_environment(
    client, admin, bob, upload, ready_sizes, inline_tasks, django_capture_on_commit_callbacks
):
    first = ready_sizes.current_revision
    env = environments_root() / first.environment_key
    before = (env.stat().st_ino, env.stat().st_mtime_ns, (env / envlib.MARKER_NAME).read_text())

    # bob's toolkit asks for exactly what friendly_sizes asks for: humanize is approved
    # already, so it goes straight to the build.
    source = example("friendly_sizes").replace("title: Friendly Sizes", "title: Sizes Again")
    with django_capture_on_commit_callbacks(execute=True):
        twin = upload(bob, source, slug="sizes_again")
    second = _revision(twin)
    assert second.status == Status.READY, second.build_log[-3000:]
    assert second.environment_key == first.environment_key
    assert second.lock == first.lock
    # Neither pip-compile nor uv ran for it: the lock and the environment were reused.
    assert f"Reusing the lock of {first.toolkit_id}#1 (same requirements)" in second.build_log
    assert f"environment {first.environment_key} is ready; reusing it" in second.build_log
    assert "pip-compile" not in second.build_log
    assert "uv pip install" not in second.build_log
    assert (env.stat().st_ino, env.stat().st_mtime_ns, (env / envlib.MARKER_NAME).read_text()) == before


@pytest.mark.slow
@pytest.mark.django_db
def test_a_toolkit_without_requirements_uses_the_runtime_lock_without_its_index_options(
    alice, upload, inline_tasks, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        toolkit = upload(alice, example("string_reverse"))
    revision = _revision(toolkit)
    assert revision.status == Status.READY, revision.build_log[-3000:]
    assert "No requirements: using the runtime's own lock" in revision.build_log
    assert "pydantic==" in revision.lock
    # The committed lock's index options belong to the machine that compiled it.
    assert not [line for line in revision.lock.splitlines() if line.startswith("-")]


# REJECTION
# ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_rejected_package_rejects_the_revision_with_the_reason_for_its_author(client, admin, alice, sizes):
    client.force_login(admin)
    client.post(DECIDE, {"name": "humanize", "action": "reject", "reason": "Pick the stdlib's formatting."})
    revision = _revision(sizes)
    assert revision.status == Status.REJECTED
    assert revision.status_detail == "package humanize was rejected: Pick the stdlib's formatting."
    assert (revision.lock, revision.environment_key) == ("", "")

    client.force_login(alice)
    tab = client.get("/toolkits/friendly_sizes/environment/")
    html = tab.content.decode()
    assert 'data-status="rejected"' in html
    assert "package humanize was rejected: Pick the stdlib&#x27;s formatting." in html
    # Not live: nothing is being built.
    assert "hx-get" not in html
    data = client.get("/api/v1/toolkits/friendly_sizes").json()
    assert (data["status"], data["status_detail"]) == (
        "rejected", "package humanize was rejected: Pick the stdlib's formatting.",
    )


# FAILING BUILDS
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db
def test_a_new_revision_that_fails_to_build_leaves_the_previous_one_current(
    client, admin, alice, ready_sizes, inline_tasks, django_capture_on_commit_callbacks, monkeypatch
):
    first = ready_sizes.current_revision
    broken = example("friendly_sizes").replace("requirements: humanize>=4", "requirements: humanize>=4, toolhub-nonexistent-pkg")
    toolkit_services.revision_upload(toolkit=ready_sizes, source=broken, user=alice)
    assert _revision(ready_sizes, 2).status == Status.AWAITING_APPROVAL

    _approve(client, admin, "toolhub-nonexistent-pkg", django_capture_on_commit_callbacks)
    second = _revision(ready_sizes, 2)
    assert second.status == Status.FAILED
    # One line, naming the package; the full output is in the log.
    assert "\n" not in second.status_detail
    assert "toolhub-nonexistent-pkg" in second.status_detail
    assert "pip-compile" in second.build_log
    assert f"Build failed: {second.status_detail}" in second.build_log
    assert second.environment_key == ""

    # The first revision stays current, ready and usable.
    toolkit = _toolkit(ready_sizes)
    assert toolkit.current_revision_id == first.pk
    assert toolkit.status == Status.READY
    assert (environments_root() / first.environment_key / envlib.MARKER_NAME).is_file()
    from toolhub.runs import services as run_services

    monkeypatch.setattr(broker, "send", lambda *args: None)
    invocation = run_services.invocation_create(
        toolkit=toolkit, tool="natural_size", arguments={"num_bytes": 3_000_000}, user=alice
    )
    run_invocation.run(str(invocation.id))
    invocation = Invocation.objects.get(pk=invocation.id)
    assert (invocation.status, invocation.revision_id, invocation.result) == (RunStatus.SUCCEEDED, first.pk, "3.0 MB")

    # The author sees the failure, with a Retry button, on the Environment tab.
    client.force_login(alice)
    html = client.get("/toolkits/friendly_sizes/environment/").content.decode()
    assert 'data-status="failed"' in html
    assert second.status_detail.replace("'", "&#x27;") in html
    assert 'action="/toolkits/friendly_sizes/environment/retry/"' in html
    overview = client.get("/toolkits/friendly_sizes/").content.decode()
    assert "Revision 2 is Failed; the current revision stays in use until it is ready." in overview


@pytest.mark.slow
@pytest.mark.django_db
def test_a_new_revision_that_builds_becomes_current(alice, ready_sizes, inline_tasks, django_capture_on_commit_callbacks):
    newer = example("friendly_sizes").replace("version: 0.1.0", "version: 0.2.0")
    with django_capture_on_commit_callbacks(execute=True):
        toolkit_services.revision_upload(toolkit=ready_sizes, source=newer, user=alice)
        # Until it is ready, the first revision stays current.
        assert _toolkit(ready_sizes).current_revision.number == 1
    second = _revision(ready_sizes, 2)
    assert second.status == Status.READY, second.build_log[-3000:]
    toolkit = _toolkit(ready_sizes)
    assert (toolkit.current_revision_id, toolkit.status) == (second.pk, Status.READY)
    assert toolkit.current_revision.version == "0.2.0"


@pytest.mark.slow
@pytest.mark.django_db
def test_a_constraint_that_contradicts_the_requirement_fails_the_build(
    client, admin, sizes, inline_tasks, django_capture_on_commit_callbacks
):
    _approve(client, admin, "humanize", django_capture_on_commit_callbacks, constraint="<4")
    revision = _revision(sizes)
    assert revision.status == Status.FAILED
    assert revision.status_detail == "constraint humanize<4 contradicts requirement humanize>=4"
    assert revision.lock == ""


@pytest.mark.slow
@pytest.mark.django_db
def test_a_package_that_fails_to_build_fails_and_leaves_nothing_behind(
    client, admin, alice, upload, demo_find_links, inline_tasks, django_capture_on_commit_callbacks
):
    toolkit = upload(alice, toolkit_source("Broken Build", "toolhub-demo-broken"), slug="broken_build")
    # Only as source: an admin allows its build (binary-only is the default).
    _approve(client, admin, "toolhub-demo-broken", django_capture_on_commit_callbacks, source_build="on")
    revision = _revision(toolkit)
    assert revision.status == Status.FAILED
    assert "toolhub-demo-broken" in revision.status_detail
    assert "\n" not in revision.status_detail
    assert "toolhub-demo-broken refuses to build" in revision.build_log
    # The lock was made (metadata builds); the environment for it was never published.
    key = envlib.environment_key(lock=revision.lock, interpreter=django_settings.TOOLHUB_INTERPRETER)
    root = environments_root()
    assert not (root / key).exists()
    assert _leftovers(root, key) == []
    assert revision.environment_key == ""


@pytest.mark.slow
@pytest.mark.django_db
def test_a_build_past_its_time_budget_fails_with_the_reason(
    settings, client, admin, alice, upload, demo_find_links, slow_gate, inline_tasks, django_capture_on_commit_callbacks
):
    # One budget for the lock and the environment together.
    settings.TOOLHUB_BUILD_TIMEOUT = 8
    toolkit = upload(alice, toolkit_source("Slow Build", "toolhub-demo-slow"), slug="slow_build")
    started = time.monotonic()
    _approve(client, admin, "toolhub-demo-slow", django_capture_on_commit_callbacks, source_build="on")
    assert time.monotonic() - started < 30
    revision = _revision(toolkit)
    assert (revision.status, revision.status_detail) == (Status.FAILED, "build timed out after 8 s")
    [build] = slow_gate.slow_builds()
    assert _wait_for(lambda: _pid_gone(build["pid"]), timeout=10, what="the package build to be killed")
    key = envlib.environment_key(lock=revision.lock, interpreter=django_settings.TOOLHUB_INTERPRETER)
    assert not (environments_root() / key).exists()
    assert _leftovers(environments_root(), key) == []


# RETRY
# ------------------------------------------------------------------------------------------


def _failed(toolkit) -> Revision:
    """Mark the toolkit's revision as failed the way the build task does, with its lock."""
    revision = _revision(toolkit)
    revision.lock = "humanize==4.0 \\\n    --hash=sha256:00\n"
    revision.build_log = "earlier output"
    revision.set_status(Status.FAILED, as_written("no output for 300 s"))
    revision.save()
    return revision


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["alice", "admin"])
def test_the_owner_or_an_admin_can_retry_a_failed_build(client, request, who, sizes, django_capture_on_commit_callbacks):
    Package.objects.filter(name="humanize").update(status=Approval.APPROVED)
    revision = _failed(sizes)
    client.force_login(request.getfixturevalue(who))
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post("/toolkits/friendly_sizes/environment/retry/", follow=True)
    assert response.redirect_chain == [("/toolkits/friendly_sizes/environment/", 302)]
    assert [str(m) for m in response.context["messages"]] == ["Build queued again."]
    revision.refresh_from_db()
    assert (revision.status, revision.status_detail) == (Status.BUILDING, "Queued for build")
    # A retry starts over: a fresh lock and log.
    assert (revision.lock, revision.environment_key, revision.build_log) == ("", "", "")
    assert len(callbacks) == 1
    # The page polls while the build runs.
    assert "hx-get=\"/toolkits/friendly_sizes/environment/live/\"" in response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["bob", "carol"])
def test_others_cannot_retry(client, request, who, sizes, django_capture_on_commit_callbacks):
    Package.objects.filter(name="humanize").update(status=Approval.APPROVED)
    revision = _failed(sizes)
    client.force_login(request.getfixturevalue(who))
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post("/toolkits/friendly_sizes/environment/retry/")
    assert response.status_code == 403
    revision.refresh_from_db()
    assert revision.status == Status.FAILED
    assert callbacks == []
    html = client.get("/toolkits/friendly_sizes/environment/").content.decode()
    assert "/environment/retry/" not in html


@pytest.mark.django_db
def test_retry_needs_a_login_and_a_post(client, alice, sizes):
    _failed(sizes)
    response = client.post("/toolkits/friendly_sizes/environment/retry/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    client.force_login(alice)
    assert client.get("/toolkits/friendly_sizes/environment/retry/").status_code == 405
    assert _revision(sizes).status == Status.FAILED


@pytest.mark.django_db
def test_retrying_a_revision_whose_package_is_still_rejected_says_so(client, admin, alice, sizes, django_capture_on_commit_callbacks):
    client.force_login(admin)
    client.post(DECIDE, {"name": "humanize", "action": "reject", "reason": "No."}, follow=True)
    client.force_login(alice)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post("/toolkits/friendly_sizes/environment/retry/", follow=True)
    assert [str(m) for m in response.context["messages"]] == ["package humanize was rejected: No."]
    assert _revision(sizes).status == Status.REJECTED
    assert callbacks == []


@pytest.mark.django_db
def test_there_is_nothing_to_retry_while_building_or_ready(client, alice, upload, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        toolkit = upload(alice, example("string_reverse"))
    assert _revision(toolkit).status == Status.BUILDING
    client.force_login(alice)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(f"/toolkits/{toolkit.slug}/environment/retry/", follow=True)
    assert [str(m) for m in response.context["messages"]] == ["There is nothing to retry."]
    assert callbacks == []


# THE TRANSITIVE-APPROVAL SETTING
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db
def test_with_transitive_approval_the_names_in_the_lock_wait_in_the_queue(
    settings, client, admin, sizes, bearer, inline_tasks, django_capture_on_commit_callbacks
):
    settings.TOOLHUB_APPROVE_TRANSITIVE = True
    _approve(client, admin, "humanize", django_capture_on_commit_callbacks)
    revision = _revision(sizes)
    transitive = ["annotated-types", "pydantic", "pydantic-core", "typing-extensions", "typing-inspection"]
    assert revision.status == Status.AWAITING_APPROVAL, revision.build_log[-3000:]
    assert revision.status_detail == "Waiting for an admin to approve: " + ", ".join(transitive)
    assert "Transitive packages need approval: " + ", ".join(transitive) in revision.build_log
    assert "pydantic-core==" in revision.lock
    assert revision.environment_key == ""

    page = client.get("/packages/")
    assert [p.name for p in page.context["packages"]] == transitive
    html = page.content.decode()
    assert 'data-package="pydantic-core"' in html
    assert "transitive" in html
    pending = client.get("/api/v1/packages", {"status": "pending"}, **bearer(admin)).json()["items"]
    core = next(p for p in pending if p["name"] == "pydantic-core")
    [request] = core["requested_by"]
    assert request["toolkit"] == "friendly_sizes"
    assert request["specifier"].startswith("==2.")

    _approve(client, admin, transitive, django_capture_on_commit_callbacks)
    revision.refresh_from_db()
    assert revision.status == Status.READY, revision.build_log[-3000:]
    assert revision.environment_key


@pytest.mark.django_db
def test_names_from_a_lock_hold_nothing_back_once_the_setting_is_off(
    settings, client, alice, sizes, django_capture_on_commit_callbacks
):
    from toolhub.toolkits.lifecycle import submit as revision_submit

    settings.TOOLHUB_APPROVE_TRANSITIVE = True
    Package.objects.filter(name="humanize").update(status=Approval.APPROVED)
    revision = _revision(sizes)
    revision_submit(revision=revision, extra_names={"pydantic-core": "==2.50.5", "humanize": "==4.17.0"})
    revision.refresh_from_db()
    assert revision.status_detail == "Waiting for an admin to approve: pydantic-core"
    # The toolkit's own requirement keeps its own specifier; only the other name is transitive.
    assert sorted(revision.package_requests.values_list("package__name", "specifier", "transitive")) == [
        ("humanize", ">=4", False), ("pydantic-core", "==2.50.5", True),
    ]

    settings.TOOLHUB_APPROVE_TRANSITIVE = False
    client.force_login(alice)
    with django_capture_on_commit_callbacks() as callbacks:
        client.post("/toolkits/friendly_sizes/environment/retry/")
    assert _revision(sizes).status == Status.BUILDING
    assert len(callbacks) == 1


@pytest.mark.django_db
def test_transitive_approval_is_off_by_default():
    assert django_settings.TOOLHUB_APPROVE_TRANSITIVE is False


# A BUILD WHOSE WORKER DIED
# ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_reaper_fails_a_build_that_stopped_making_progress(alice, upload, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        stuck = upload(alice, example("string_reverse"))
        recent = upload(alice, example("string_reverse"), slug="still_building")
    old = timezone.now() - timedelta(seconds=django_settings.TOOLHUB_BUILD_TIMEOUT + 121)
    Revision.objects.filter(toolkit=stuck).update(status_changed_at=old)

    assert reap_stale_work.run()["builds"] == 1
    revision = _revision(stuck)
    assert (revision.status, revision.status_detail) == (Status.FAILED, lifecycle.OVERDUE.english())
    assert revision.status_changed_at > old
    assert _revision(recent).status == Status.BUILDING
    # A redelivered build of the failed revision does nothing.
    build_revision.run(revision.pk)
    assert _revision(stuck).status == Status.FAILED


@pytest.mark.django_db
def test_a_build_starts_the_reapers_clock_when_it_starts(alice, upload, django_capture_on_commit_callbacks, monkeypatch):
    with django_capture_on_commit_callbacks():
        toolkit = upload(alice, example("string_reverse"))
    long_ago = timezone.now() - timedelta(hours=2)
    Revision.objects.filter(toolkit=toolkit).update(status_changed_at=long_ago)
    seen = {}

    def lock_and_look(revision, log):
        seen["revision"] = Revision.objects.get(pk=revision.pk)
        raise envlib.BuildFailed("stop here")

    monkeypatch.setattr("toolhub.toolkits.building.lock_for", lock_and_look)
    build_revision.run(_revision(toolkit).pk)
    # While it ran, the build counted from its own start, not from when it was queued.
    assert seen["revision"].status_changed_at > long_ago + timedelta(hours=1)
    assert seen["revision"].status_detail == "Locking the requirements"
    assert (_revision(toolkit).status, _revision(toolkit).status_detail) == (Status.FAILED, "stop here")


# THE ENVIRONMENT TAB
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db
def test_the_environment_tab_shows_the_log_to_everyone_and_the_lock_to_admins(client, admin, carol, ready_sizes):
    revision = ready_sizes.current_revision
    pin = next(line for line in revision.lock.splitlines() if line.startswith("humanize=="))
    client.force_login(carol)
    html = client.get("/toolkits/friendly_sizes/environment/").content.decode()
    assert 'id="build-log"' in html
    assert f"Environment ready: {revision.environment_key}" in html
    assert "Lock file" not in html
    client.force_login(admin)
    html = client.get("/toolkits/friendly_sizes/environment/").content.decode()
    assert "Lock file" in html
    assert pin.rstrip(" \\") in html


@pytest.mark.django_db
def test_the_live_fragment_polls_while_building_and_stops_after(client, carol, upload, alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        toolkit = upload(alice, example("string_reverse"))
    revision = _revision(toolkit)
    Revision.objects.filter(pk=revision.pk).update(build_log="$ uv pip install --require-hashes\nResolved 5 packages")
    live = f"/toolkits/{toolkit.slug}/environment/live/"
    client.force_login(carol)

    page = client.get(f"/toolkits/{toolkit.slug}/environment/").content.decode()
    assert f'hx-get="{live}"' in page
    assert 'hx-trigger="every 1s"' in page
    fragment = client.get(live, HTTP_HX_REQUEST="true")
    html = fragment.content.decode()
    assert html.lstrip().startswith('<div id="environment"')
    assert "<html" not in html
    assert f'hx-get="{live}"' in html
    assert 'data-status="building"' in html
    assert "Resolved 5 packages" in html

    revision.refresh_from_db()
    revision.set_status(Status.READY)
    revision.save()
    html = client.get(live, HTTP_HX_REQUEST="true").content.decode()
    environment, _, head = html.partition('<div id="toolkit-head" hx-swap-oob="true">')
    assert "hx-get" not in environment
    assert 'data-status="ready"' in environment
    # The page's heading comes along out of band, so its status badge is not left stale.
    assert 'data-status="ready"' in head


@pytest.mark.django_db
def test_the_environment_tab_needs_a_login_and_a_real_toolkit(client, alice):
    response = client.get("/toolkits/nope/environment/")
    assert response.status_code == 302
    client.force_login(alice)
    assert client.get("/toolkits/nope/environment/").status_code == 404
    assert client.get("/toolkits/nope/environment/live/").status_code == 404


# THE ENVIRONMENTS COMMAND
# ------------------------------------------------------------------------------------------


@pytest.fixture
def own_environments_root(settings, tmp_path):
    """An environments root for one test (pruning the shared one would throw away what other
    tests reuse), under the data directory so that the sandbox user can reach it."""
    root = Path(django_settings.DATA_DIR) / f"environments-{tmp_path.name}"
    settings.TOOLHUB_ENVIRONMENTS_DIR = root
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _fake_environment(root: Path, key: str) -> Path:
    path = root / key
    path.mkdir(parents=True)
    marker = {"key": key, "interpreter": "/usr/bin/python3.11", "python_version": "3.11.2", "created_at": "2026-01-01T00:00:00+00:00"}
    (path / envlib.MARKER_NAME).write_text(json.dumps(marker))
    return path


@pytest.mark.slow
@pytest.mark.django_db
def test_the_environments_command_lists_and_prunes_unused_environments(
    settings, own_environments_root, capsys, alice, upload, inline_tasks, django_capture_on_commit_callbacks
):
    root = own_environments_root
    with django_capture_on_commit_callbacks(execute=True):
        toolkit = upload(alice, example("string_reverse"))
    used = _revision(toolkit).environment_key
    assert (root / used).is_dir()
    unused = "ab" * 32
    _fake_environment(root, unused)
    half_built = root / f".tmp-{'cd' * 32}-x1y2"
    (half_built / "lib").mkdir(parents=True)

    call_command("environments")
    listing = capsys.readouterr().out
    assert f"{used}  in use" in listing
    assert f"{unused}  unused" in listing
    assert (root / unused).is_dir()

    call_command("environments", "--prune")
    out = capsys.readouterr().out
    assert f"removed {unused}" in out
    assert f"removed unfinished build {half_built.name}" in out
    assert not (root / unused).exists()
    assert not half_built.exists()
    assert (root / used / envlib.MARKER_NAME).is_file()
    assert [info.key for info in envlib.list_environments(root)] == [used]


# A REAL WORKER
# ------------------------------------------------------------------------------------------


@pytest.mark.worker
@pytest.mark.slow
def test_a_real_worker_builds_an_approved_toolkit(worker, client, admin, alice, bearer, upload):
    toolkit = upload(alice, example("friendly_sizes"))
    assert _revision(toolkit).status == Status.AWAITING_APPROVAL
    response = client.post("/api/v1/packages/humanize/approve", {}, content_type="application/json", **bearer(admin))
    assert response.status_code == 200
    revision = _wait_for(
        lambda: Revision.objects.filter(toolkit=toolkit, status__in=[Status.READY, Status.FAILED]).first(),
        timeout=180, what="the worker to finish the build", worker=worker,
    )
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-3000:])
    assert revision.environment_key
    assert [tool["function"]["name"] for tool in revision.tools] == ["natural_size"]
    data = client.get("/api/v1/toolkits/friendly_sizes", **bearer(alice)).json()
    assert data["status"] == "ready"
    # The worker ran both tasks to their end, without an error.
    finished = re.compile(r"toolhub\.toolkits\.tasks\.introspect_revision\[[^]]+\] (succeeded|raised)")
    _wait_for(lambda: finished.search(worker.output()), timeout=30, what="the introspection task to end", worker=worker)
    assert re.search(r"toolhub\.toolkits\.tasks\.build_revision\[[^]]+\] succeeded", worker.output())
    assert finished.search(worker.output()).group(1) == "succeeded", worker.output()[-4000:]


@pytest.fixture
def slow_worker(transactional_db, tmp_path, monkeypatch, slow_gate):
    """A real worker whose builds use the demo wheelhouse, where toolhub-demo-slow's build
    waits while the gate file exists. Workers the test starts itself go in the list too, so
    that all of them are killed at the end."""
    monkeypatch.setenv("TOOLHUB_FIND_LINKS", str(slow_gate.wheelhouse))
    (tmp_path / "first").mkdir()
    first = start_worker(tmp_path / "first")
    started = [first]
    yield first, started
    for process in started:
        process.kill()


@pytest.mark.worker
@pytest.mark.slow
@pytest.mark.fault
def test_a_worker_killed_mid_build_leaves_nothing_usable_and_the_build_can_be_redone(
    slow_worker, slow_gate, client, admin, alice, carol, bearer, upload, tmp_path
):
    worker, started = slow_worker
    toolkit = upload(alice, toolkit_source("Killed Build", "toolhub-demo-slow"), slug="killed_build")
    response = client.post(
        "/api/v1/packages/toolhub-demo-slow/approve", {"source_build": True}, content_type="application/json",
        **bearer(admin),
    )
    assert response.status_code == 200

    # uv is building toolhub-demo-slow, which waits at the gate.
    build = slow_gate.wait_for_slow_build(timeout=120)
    revision = _revision(toolkit)
    assert revision.status == Status.BUILDING
    key = envlib.environment_key(lock=revision.lock, interpreter=django_settings.TOOLHUB_INTERPRETER)
    root = environments_root()
    [partial] = _leftovers(root, key)

    # Meanwhile the Environment tab streams the log of the running build.
    client.force_login(carol)
    fragment = client.get("/toolkits/killed_build/environment/live/", HTTP_HX_REQUEST="true").content.decode()
    assert 'data-status="building"' in fragment
    assert 'hx-get="/toolkits/killed_build/environment/live/"' in fragment
    assert "uv pip install" in fragment

    # The worker dies without any chance to clean up.
    os.killpg(worker.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    worker.process.wait(10)
    slow_gate.gate.unlink()
    assert _wait_for(lambda: _pid_gone(build["pid"]), timeout=30, what="the orphaned package build to end")

    # No usable half environment: nothing under the key, no marker in what was left.
    assert not (root / key).exists()
    assert not (root / partial / envlib.MARKER_NAME).exists()
    assert key not in [info.key for info in envlib.list_environments(root)]
    revision.refresh_from_db()
    assert (revision.status, revision.environment_key) == (Status.BUILDING, "")

    # The periodic reaper (run here every second, with its real thresholds) ends the build
    # within about a minute of the kill: its worker stopped beating...
    while _revision(toolkit).status == Status.BUILDING and time.monotonic() - killed_at < 90:
        reap_stale_work.run()
        time.sleep(1)
    revision.refresh_from_db()
    assert (revision.status, revision.status_detail) == (Status.FAILED, INTERRUPTED)
    # (The last beat came up to one interval before the kill.)
    silent = heartbeat.DEAD_AFTER_SECONDS - heartbeat.EVERY_SECONDS
    assert silent <= time.monotonic() - killed_at < 60

    # ...and a Retry on a fresh worker builds it cleanly, discarding the leftover.
    (tmp_path / "second").mkdir()
    started.append(start_worker(tmp_path / "second"))
    client.force_login(alice)
    assert client.post("/toolkits/killed_build/environment/retry/").status_code == 302
    revision = _wait_for(
        lambda: Revision.objects.filter(pk=revision.pk, status__in=[Status.READY, Status.FAILED]).first(),
        timeout=180, what="the second worker to finish the build", worker=started[-1],
    )
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-3000:])
    assert revision.environment_key == key
    assert f"removing unfinished build {partial}" in revision.build_log
    assert _leftovers(root, key) == []
    assert (root / key / envlib.MARKER_NAME).is_file()
