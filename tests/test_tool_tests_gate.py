"""Tool tests gate revisions, with a real worker and sandbox: a revision that
breaks a saved test does not become current and its owner sees which case failed and how; one
that passes does; an admin may approve a failing one with a reason, which is recorded."""

from __future__ import annotations

import time

import pytest

from tests.conftest import start_worker
from toolhub.runs.models import Invocation, RunStatus, Surface
from toolhub.toolkits import lifecycle
from toolhub.toolkits.models import Revision, Status, Toolkit, ToolTestRun, ToolTestStatus
from toolhub.toolkits.services import revision_upload, toolkit_create
from toolhub.toolkits.tool_tests import tool_test_create
from toolhub.vault.secret_fields import MASK

SOURCE = '''"""
title: Greeter
author: tests
version: %(version)s
"""


class Tools:
    def greet(self, name: str) -> str:
        """Greet someone.
        :param name: Who
        """
        return %(body)s

    def profile(self, name: str) -> dict:
        """A profile as JSON.
        :param name: Who
        """
        return {"user": {"name": name, "tags": ["a", "b"]}}
'''

GOOD = SOURCE % {"version": "1.0.0", "body": 'f"Hello, {name}!"'}
BROKEN = SOURCE % {"version": "2.0.0", "body": 'f"Goodbye, {name}."'}
FIXED = SOURCE % {"version": "3.0.0", "body": 'f"Hello, {name}!"  # still friendly'}


def _settled(revision_id: int, seconds: float = 240) -> Revision:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        revision = Revision.objects.get(pk=revision_id)
        if revision.status not in (Status.BUILDING, Status.UPLOADED):
            return revision
        time.sleep(0.2)
    raise AssertionError(f"revision {revision_id} still {revision.status}: {revision.status_detail}")


@pytest.fixture
def greeter(transactional_db, alice, tmp_path):
    worker = start_worker(tmp_path)
    try:
        toolkit = toolkit_create(source=GOOD, user=alice, slug="greeter").toolkit
        first = _settled(toolkit.current_revision_id)
        assert first.status == Status.READY, (first.status_detail, worker.output()[-3000:])
        toolkit = Toolkit.objects.select_related("current_revision").get(pk=toolkit.pk)
        tool_test_create(toolkit=toolkit, name="says hello", tool="greet", arguments={"name": "Ada"},
                         checks=[{"kind": "equals", "value": "Hello, Ada!"}], by=alice)
        tool_test_create(toolkit=toolkit, name="profile tags", tool="profile", arguments={"name": "Ada"},
                         checks=[{"kind": "json_path", "path": "$.user.tags[1]", "value": "b"},
                                 {"kind": "regex", "value": r"\"name\": \"Ada\""}], by=alice)
        yield toolkit, worker
    finally:
        worker.kill()


@pytest.mark.worker
def test_a_revision_that_breaks_a_test_does_not_become_current_and_the_owner_sees_why(greeter, alice, admin, client):
    toolkit, worker = greeter
    broken = _settled(revision_upload(toolkit=toolkit, source=BROKEN, user=alice).revision.pk)
    assert broken.status == Status.AWAITING_REVIEW, (broken.status_detail, worker.output()[-3000:])
    assert broken.status_detail == "1 of its 2 tests failed (says hello); an admin may still approve it."
    assert Toolkit.objects.get(pk=toolkit.pk).current_revision.number == 1

    run = ToolTestRun.objects.get(revision=broken, gate=True)
    assert (run.status, run.total, run.failed, run.started_by) == (ToolTestStatus.FAILED, 2, 1, alice)
    failing, passing = run.results.order_by("-passed", "name").reverse()
    assert (failing.name, failing.passed, passing.passed) == ("says hello", False, True)
    assert failing.message == "Check 1 (equals): the result differs."
    assert (failing.expected, failing.actual) == ("Hello, Ada!", "Goodbye, Ada.")
    # Each case is an invocation of its own, with the surface `test`, in the history.
    invocation = Invocation.objects.get(pk=failing.invocation_id)
    assert (invocation.surface, invocation.status, invocation.revision_id, invocation.user) == (
        Surface.TEST, RunStatus.SUCCEEDED, broken.pk, alice)

    # The owner sees the failed case, its diff and a link to its invocation.
    client.force_login(alice)
    assert "1 of its 2 tests failed (says hello)" in client.get("/toolkits/greeter/").content.decode()
    page = client.get(f"/toolkits/greeter/tests/runs/{run.pk}/").content.decode()
    assert "says hello" in page and "-Hello, Ada!" in page and "+Goodbye, Ada." in page
    assert f"/invocations/{invocation.pk}/" in page
    # The API says the same.
    detail = client.get(f"/api/v1/toolkits/greeter/revisions/2/test-runs/{run.pk}").json()
    assert detail["status"] == "failed"
    assert [(c["test"], c["passed"], c["result"]) for c in detail["cases"]] == [
        ("profile tags", True, {"user": {"name": "Ada", "tags": ["a", "b"]}}), ("says hello", False, "Goodbye, Ada.")]

    # An admin approves it anyway: only with a reason, which is recorded on the run.
    client.force_login(admin)
    review = client.get("/packages/reviews/").content.decode()
    assert "says hello" in review and "+Goodbye, Ada." in review
    client.post(f"/packages/reviews/{broken.pk}/", {"action": "approve"})
    assert Revision.objects.get(pk=broken.pk).status == Status.AWAITING_REVIEW
    client.post(f"/packages/reviews/{broken.pk}/", {"action": "approve", "reason": "the new wording is intended"})
    run.refresh_from_db()
    assert (run.status, run.overridden_by, run.override_reason) == (
        ToolTestStatus.OVERRIDDEN, admin, "the new wording is intended")
    assert Toolkit.objects.get(pk=toolkit.pk).current_revision.number == 2


@pytest.mark.worker
def test_a_revision_that_passes_its_tests_becomes_current(greeter, alice):
    toolkit, worker = greeter
    fixed = _settled(revision_upload(toolkit=toolkit, source=FIXED, user=alice).revision.pk)
    assert fixed.status == Status.READY, (fixed.status_detail, worker.output()[-3000:])
    assert Toolkit.objects.get(pk=toolkit.pk).current_revision_id == fixed.pk
    run = ToolTestRun.objects.get(revision=fixed, gate=True)
    assert (run.status, run.failed) == (ToolTestStatus.PASSED, 0)
    assert all(run.results.values_list("passed", flat=True))
    assert lifecycle.tests_failed(fixed) is None


HANGING = '''"""
title: Sleeper
author: tests
version: %(version)s
"""


class Tools:
    def nap(self, seconds: int) -> str:
        """Sleep.
        :param seconds: How long
        """
        import time

        time.sleep(seconds)
        return "rested"
'''


@pytest.fixture
def sleeper(transactional_db, alice, tmp_path):
    """A toolkit whose saved test sleeps for an hour, on a worker whose sandbox stops a call
    after 4 s."""
    worker = start_worker(tmp_path, env={"TOOLHUB_SANDBOX_WALL_SECONDS": "4"})
    try:
        toolkit = toolkit_create(source=HANGING % {"version": "1"}, user=alice, slug="sleeper").toolkit
        assert _settled(toolkit.current_revision_id).status == Status.READY, worker.output()[-3000:]
        toolkit = Toolkit.objects.select_related("current_revision").get(pk=toolkit.pk)
        tool_test_create(toolkit=toolkit, name="an hour", tool="nap", arguments={"seconds": 3600},
                         checks=[{"kind": "equals", "value": "rested"}], by=alice)
        yield toolkit, worker
    finally:
        worker.kill()


@pytest.mark.worker
def test_a_hanging_test_is_stopped_by_the_sandboxs_wall_clock_limit(sleeper, alice):
    toolkit, worker = sleeper
    started = time.monotonic()
    revision = _settled(revision_upload(toolkit=toolkit, source=HANGING % {"version": "2"}, user=alice).revision.pk, 120)
    assert time.monotonic() - started < 90
    assert revision.status == Status.AWAITING_REVIEW, (revision.status_detail, worker.output()[-3000:])
    [case] = ToolTestRun.objects.get(revision=revision).results.all()
    assert case.message == "The call failed: The tool ran longer than 4 s and was stopped."
    assert Invocation.objects.get(pk=case.invocation_id).status == RunStatus.TIMED_OUT


@pytest.mark.worker
def test_a_worker_that_dies_mid_run_is_reaped_like_other_steps(sleeper, alice):
    from datetime import timedelta

    from django.utils import timezone

    from toolhub.reaper import reap_stale_work
    from toolhub.runs.tool_tests import WORKER_STOPPED

    toolkit, worker = sleeper
    revision = revision_upload(toolkit=toolkit, source=HANGING % {"version": "3"}, user=alice).revision
    deadline = time.monotonic() + 120
    # Killed while the case's call runs in the sandbox.
    while not Invocation.objects.filter(revision=revision, status=RunStatus.RUNNING).exists():
        assert time.monotonic() < deadline, worker.output()[-3000:]
        time.sleep(0.1)
    worker.kill()
    # As if the reaper's 30 s of silence had passed.
    long_ago = timezone.now() - timedelta(minutes=2)
    Revision.objects.filter(pk=revision.pk).update(heartbeat_at=long_ago)
    ToolTestRun.objects.filter(revision=revision).update(heartbeat_at=long_ago)
    Invocation.objects.filter(revision=revision).update(heartbeat_at=long_ago)
    reaped = reap_stale_work.run()
    assert (reaped["builds"], reaped["test_runs"], reaped["invocations"]) == (1, 1, 1)
    revision.refresh_from_db()
    assert (revision.status, revision.status_detail) == (Status.FAILED, lifecycle.INTERRUPTED.english())
    run = ToolTestRun.objects.get(revision=revision)
    assert (run.status, run.error) == (ToolTestStatus.FAILED, WORKER_STOPPED.english())
    assert Toolkit.objects.get(pk=toolkit.pk).current_revision.number == 1


PERSONAL = '''"""
title: Personal
author: tests
version: %(version)s
"""
from pydantic import BaseModel, Field


class Tools:
    class UserValves(BaseModel):
        greeting: str = "Hello"
        token: str = Field("", json_schema_extra={"format": "password"})

    def greet(self, name: str, __user__: dict) -> str:
        """Greet someone.
        :param name: Who
        """
        valves = __user__["valves"]
        return f"{valves.greeting}, {name} (token {valves.token})"
'''
TOKEN = "tok-5518-saved-with-the-test"


@pytest.mark.worker
def test_a_test_runs_with_the_user_valves_saved_with_it_and_their_secret_is_masked(transactional_db, alice, tmp_path):
    worker = start_worker(tmp_path)
    try:
        toolkit = toolkit_create(source=PERSONAL % {"version": "1"}, user=alice, slug="personal").toolkit
        assert _settled(toolkit.current_revision_id).status == Status.READY, worker.output()[-3000:]
        toolkit = Toolkit.objects.select_related("current_revision").get(pk=toolkit.pk)
        tool_test_create(toolkit=toolkit, name="in french", tool="greet", arguments={"name": "Ada"},
                         checks=[{"kind": "contains", "value": "Bonjour, Ada"}],
                         user_valves={"greeting": "Bonjour", "token": TOKEN}, by=alice)
        revision = _settled(revision_upload(toolkit=toolkit, source=PERSONAL % {"version": "2"}, user=alice).revision.pk)
    finally:
        worker.kill()
    assert revision.status == Status.READY, (revision.status_detail, worker.output()[-3000:])
    [case] = ToolTestRun.objects.get(revision=revision).results.all()
    invocation = Invocation.objects.get(pk=case.invocation_id)
    # The test's own UserValves reached the tool; their secret is masked in what is stored.
    assert invocation.result == f"Bonjour, Ada (token {MASK})"
    assert TOKEN not in repr(list(Invocation.objects.values())) + repr(list(ToolTestRun.objects.values()))


@pytest.mark.django_db
def test_a_revision_tested_again_ends_the_run_of_its_earlier_attempt(upload, alice):
    toolkit = upload(alice, GOOD, slug="greeter")
    Revision.objects.filter(pk=toolkit.current_revision_id).update(status=Status.READY)
    toolkit.refresh_from_db()
    tool_test_create(toolkit=toolkit, name="says hello", tool="greet", arguments={"name": "Ada"}, checks=[], by=alice)
    revision = revision_upload(toolkit=toolkit, source=BROKEN, user=alice).revision
    assert lifecycle.tests_begin(revision=revision)
    first = ToolTestRun.objects.get(revision=revision)
    assert (revision.status, revision.status_detail, first.status) == (Status.BUILDING, "Running its 1 tests", ToolTestStatus.QUEUED)
    assert lifecycle.tests_begin(revision=revision)
    first.refresh_from_db()
    assert (first.status, first.error) == (ToolTestStatus.FAILED, lifecycle.TESTS_REPLACED.english())
    assert ToolTestRun.objects.filter(revision=revision, status=ToolTestStatus.QUEUED).count() == 1
