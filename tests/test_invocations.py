"""Invocations end to end in the real sandbox. Most tests need no broker: a toolkit is
uploaded and built (pip-compile, uv and the introspection in bubblewrap), then the worker's
task `run_invocation` runs in this process. They cover the demo toolkits' documented answers
(toolhub/toolkits/demo/), valves and user valves, `__event_call__` answered through the
API or timed out, a raising tool, the wall-clock, memory and CPU limits, events stored while
the tool still runs, and the heartbeat that tells a live worker from a dead one. The last two
tests (`worker`) go through the API to a real Celery worker process, and kill it mid-run."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connections
from django.utils import timezone

from tests.conftest import example, purge_queues, start_worker
from tests.helpers import bearer_headers
from tests.sandbox_fixtures import require_sandbox, sandbox_user_names, wait_for_no_sandbox_processes
from toolhub import heartbeat
from toolhub.reaper import reap_stale_work
from toolhub.runs import engine
from toolhub.runs.models import Event, Invocation, RunStatus
from toolhub.runs.services import InvocationRejected, invocation_create
from toolhub.runs.tasks import run_invocation
from toolhub.toolkits.models import Status
from toolhub.toolkits.valves import store_values

pytestmark = [pytest.mark.sandbox, pytest.mark.django_db(transaction=True)]

# Tools that misbehave on purpose. Every test that needs one builds this toolkit; its lock is
# the runtime's own, so after the first build the environment is reused.
HARNESS = '''"""
title: Test Harness
author: ToolHub tests
description: Tools that ask, fail, sleep and hog on purpose.
version: 1.0.0
"""

import time


class Tools:
    async def confirm(self, what: str, __event_call__=None) -> str:
        """Ask for a confirmation, then say what the answer was."""
        ok = await __event_call__(
            {"type": "confirmation", "data": {"title": "Sure?", "message": f"Delete {what}?"}}
        )
        return f"confirmed={ok!r}"

    async def ask_name(self, __event_call__=None) -> str:
        """Ask for a text input."""
        answer = await __event_call__(
            {"type": "input", "data": {"title": "Name", "message": "Who are you?", "placeholder": "name"}}
        )
        return f"answer={answer!r}"

    def boom(self, why: str = "broken") -> str:
        """Always raises."""
        raise ValueError(f"the tool is {why}\\nand this is a second line")

    def nap(self, seconds: float = 3600.0, __event_emitter__=None) -> str:
        """Report a status, then sleep."""
        if __event_emitter__:
            __event_emitter__({"type": "status", "data": {"description": "napping", "done": False}})
        time.sleep(seconds)
        return "rested"

    def hog(self, gib: int = 8) -> str:
        """Ask for far more memory than the sandbox allows."""
        block = bytearray(gib << 30)
        return str(len(block))

    def spin(self) -> str:
        """Burn CPU forever."""
        n = 0
        while True:
            n += 1
'''


@pytest.fixture(autouse=True)
def _sandbox_available():
    require_sandbox()


@pytest.fixture
def ready(upload, build):
    """Upload a source as a user and build it; the toolkit comes back ready."""

    def _ready(user, source: str):
        toolkit = build(upload(user, source))
        revision = toolkit.current_revision
        assert revision.status == Status.READY, (revision.status_detail, revision.traceback)
        return toolkit

    return _ready


def invoke(toolkit, tool: str, user, **arguments) -> Invocation:
    """What the worker does for one accepted call, in this process."""
    invocation = invocation_create(toolkit=toolkit, tool=tool, arguments=arguments, user=user)
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    return invocation


def start_in_thread(invocation: Invocation) -> threading.Thread:
    """Run the task in a thread, as a worker would, while the test answers or watches."""

    def target() -> None:
        try:
            run_invocation.run(str(invocation.id))
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def wait_until(predicate, *, timeout: float = 30.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def status_of(invocation: Invocation) -> str:
    return Invocation.objects.values_list("status", flat=True).get(pk=invocation.pk)


bearer = bearer_headers


# The demo toolkits, as their documentation says they must answer
# ------------------------------------------------------------------------------


def test_string_reverse_needs_the_admin_api_key(ready, alice, admin):
    toolkit = ready(alice, example("string_reverse"))

    before = invoke(toolkit, "reverse_string", alice, string="abc")
    assert (before.status, before.result) == (RunStatus.SUCCEEDED, "Wrong API key")

    store_values(toolkit=toolkit, values={"api_key": "42"}, by=admin)
    after = invoke(toolkit, "reverse_string", alice, string="abc")
    assert (after.status, after.result, after.result_type) == (RunStatus.SUCCEEDED, "cba", "text")
    assert after.error == "" and after.traceback == ""
    assert after.started_at <= after.finished_at and after.duration_ms is not None


def test_bad_calculator_runs_unchanged_and_adds_a_hundred(ready, alice, carol):
    toolkit = ready(alice, example("bad_calculator"))
    invocation = invoke(toolkit, "bad_calculator", carol, a=1, b=2)
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "103")


def test_a_plugin_on_ragflows_older_import_path_uploads_builds_and_runs_in_the_sandbox(ready, alice, carol):
    source = example("bad_calculator").replace("from agent.plugin.llm_tool_plugin", "from plugin.llm_tool_plugin")
    assert "from plugin.llm_tool_plugin import" in source
    toolkit = ready(alice, source)
    assert toolkit.current_revision.requirements == []  # no package named `plugin`
    invocation = invoke(toolkit, "bad_calculator", carol, a=1, b=2)
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "103")


def test_lookup_reports_status_and_cites_one_source(ready, alice):
    toolkit = ready(alice, example("library_lookup"))
    invocation = invoke(toolkit, "lookup", alice, word="valve")

    assert invocation.status == RunStatus.SUCCEEDED
    assert invocation.result.startswith("valve:")
    events = list(invocation.events.all())
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [e.type for e in events]
    assert kinds.count("citation") == 1
    assert kinds.count("status") >= 2 and kinds[0] == "status" and kinds[-1] == "status"
    citation = next(e.data for e in events if e.type == "citation")
    assert citation["source"] == {"name": "Glossary: valve", "url": "https://example.org/glossary#valve"}
    assert citation["document"][0].startswith("A setting of a toolkit")
    assert events[-1].data["done"] is True


def test_count_words_counts_unique_words(ready, alice):
    toolkit = ready(alice, example("library_lookup"))
    invocation = invoke(toolkit, "count_words", alice, text="a b a", unique=True)
    # An int comes back as its repr (DESIGN.md: anything but str/dict/list/model).
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "2")


def test_each_users_own_user_valves_shape_their_output(ready, alice, carol):
    toolkit = ready(alice, example("library_lookup"))
    store_values(toolkit=toolkit, values={"style": "long"}, user=alice, by=alice)

    long = invoke(toolkit, "lookup", alice, word="valve")
    short = invoke(toolkit, "lookup", carol, word="valve")

    assert short.result == "valve: A setting of a toolkit"
    assert long.result == "valve: A setting of a toolkit, edited by an admin (Valves) or by each user (UserValves)."


def test_friendly_sizes_runs_once_its_package_is_approved(ready, upload, build, alice, admin):
    from toolhub.toolkits.lifecycle import package_approve

    toolkit = upload(alice, example("friendly_sizes"))
    assert toolkit.current_revision.status == Status.AWAITING_APPROVAL
    with pytest.raises(InvocationRejected) as refused:
        invocation_create(toolkit=toolkit, tool="natural_size", arguments={"num_bytes": 1}, user=alice)
    assert refused.value.status == 409 and "approve" in refused.value.errors[0][0]

    package_approve(name="humanize", user=admin)
    toolkit = build(toolkit)
    assert toolkit.current_revision.status == Status.READY, toolkit.current_revision.status_detail
    invocation = invoke(toolkit, "natural_size", alice, num_bytes=1500000)
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "1.5 MB")


# __event_call__
# ------------------------------------------------------------------------------


def test_a_confirmation_waits_for_the_invokers_answer_through_the_api(ready, alice, client):
    toolkit = ready(alice, HARNESS)
    invocation = invocation_create(toolkit=toolkit, tool="confirm", arguments={"what": "everything"}, user=alice)
    thread = start_in_thread(invocation)
    wait_until(lambda: status_of(invocation) == RunStatus.AWAITING_INPUT, what="awaiting_input")

    seen = client.get(f"/api/v1/invocations/{invocation.id}", **bearer(alice)).json()
    assert seen["status"] == "awaiting_input"
    assert seen["pending_call"] == {"type": "confirmation", "data": {"title": "Sure?", "message": "Delete everything?"}}

    answered = client.post(
        f"/api/v1/invocations/{invocation.id}/respond", json.dumps({"value": True}),
        content_type="application/json", **bearer(alice),
    )
    assert answered.status_code == 200, answered.content
    thread.join(30)
    assert not thread.is_alive()

    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "confirmed=True")
    assert invocation.pending_call is None
    assert [e.type for e in invocation.events.all()] == ["call_answered"]


def test_an_input_answer_reaches_the_tool_as_text(ready, alice, client):
    toolkit = ready(alice, HARNESS)
    invocation = invocation_create(toolkit=toolkit, tool="ask_name", arguments={}, user=alice)
    thread = start_in_thread(invocation)
    wait_until(lambda: status_of(invocation) == RunStatus.AWAITING_INPUT, what="awaiting_input")

    answered = client.post(
        f"/api/v1/invocations/{invocation.id}/respond", json.dumps({"value": "Ada"}),
        content_type="application/json", **bearer(alice),
    )
    assert answered.status_code == 200, answered.content
    thread.join(30)

    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "answer='Ada'")


def test_an_unanswered_call_times_out_into_an_error_value_and_the_run_ends(ready, alice, settings):
    settings.TOOLHUB_EVENT_CALL_TIMEOUT = 1.0
    toolkit = ready(alice, HARNESS)

    started = time.monotonic()
    confirmation = invoke(toolkit, "confirm", alice, what="x")
    assert time.monotonic() - started < 20
    # A confirmation nobody answered counts as "no"; the tool goes on and finishes.
    assert (confirmation.status, confirmation.result) == (RunStatus.SUCCEEDED, "confirmed=False")
    timeout_event = confirmation.events.get(type="call_timeout")
    assert timeout_event.data["seconds"] == 1.0

    text = invoke(toolkit, "ask_name", alice)
    assert text.status == RunStatus.SUCCEEDED
    assert text.result.startswith("answer={'error': ") and "timed out" in text.result


# Failures and limits
# ------------------------------------------------------------------------------


def test_a_raising_tool_fails_with_a_one_line_error_and_a_stored_traceback(ready, alice):
    toolkit = ready(alice, HARNESS)
    invocation = invoke(toolkit, "boom", alice, why="on fire")

    assert invocation.status == RunStatus.FAILED
    assert invocation.error == "ValueError: the tool is on fire and this is a second line"
    assert "\n" not in invocation.error
    assert "Traceback (most recent call last)" in invocation.traceback
    assert 'raise ValueError(f"the tool is {why}' in invocation.traceback
    assert invocation.result is None and invocation.finished_at is not None


def test_a_tool_that_sleeps_forever_is_stopped_at_the_wall_clock_limit(ready, alice, settings):
    settings.TOOLHUB_SANDBOX_WALL_SECONDS = 2.0
    toolkit = ready(alice, HARNESS)

    started = time.monotonic()
    invocation = invoke(toolkit, "nap", alice)
    elapsed = time.monotonic() - started

    assert invocation.status == RunStatus.TIMED_OUT
    assert invocation.limit == "wall_time"
    assert "2 s" in invocation.error
    assert elapsed < 15
    # The status it sent before sleeping was kept.
    assert [e.data["description"] for e in invocation.events.filter(type="status")] == ["napping"]


def test_a_memory_hog_fails_on_the_memory_limit(ready, alice, settings):
    settings.TOOLHUB_SANDBOX_MEMORY_MB = 512
    toolkit = ready(alice, HARNESS)
    invocation = invoke(toolkit, "hog", alice)

    assert invocation.status == RunStatus.FAILED
    assert invocation.limit == "memory"
    assert "memory" in invocation.error
    # The MemoryError's traceback is kept for the owner (the launcher keeps the final message).
    assert "MemoryError" in invocation.traceback


def test_a_cpu_spinner_fails_on_the_cpu_limit(ready, alice, settings):
    settings.TOOLHUB_SANDBOX_CPU_SECONDS = 1
    toolkit = ready(alice, HARNESS)
    invocation = invoke(toolkit, "spin", alice)
    assert (invocation.status, invocation.limit) == (RunStatus.FAILED, "cpu_time")


# While it runs
# ------------------------------------------------------------------------------


def test_events_are_stored_while_the_tool_still_runs(ready, alice):
    toolkit = ready(alice, HARNESS)
    invocation = invocation_create(toolkit=toolkit, tool="nap", arguments={"seconds": 2}, user=alice)
    thread = start_in_thread(invocation)

    wait_until(lambda: Event.objects.filter(invocation=invocation).exists(), what="the first event")
    assert status_of(invocation) == RunStatus.RUNNING
    thread.join(30)
    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "rested")


def test_a_silent_tool_keeps_its_heartbeat_so_the_reaper_leaves_it_alone(ready, alice, monkeypatch):
    # The tool sends nothing while it sleeps; the worker must still show it is alive.
    monkeypatch.setattr(heartbeat, "EVERY_SECONDS", 0.2)
    toolkit = ready(alice, HARNESS)
    invocation = invocation_create(toolkit=toolkit, tool="nap", arguments={"seconds": 3}, user=alice)
    thread = start_in_thread(invocation)

    wait_until(lambda: status_of(invocation) == RunStatus.RUNNING, what="running")
    # Made to look dead (one UPDATE, no sleeping against the clock): only a beat from the
    # worker while the tool is silent brings the heartbeat back before the reaper looks.
    long_ago = timezone.now() - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS * 10)
    Invocation.objects.filter(pk=invocation.pk).update(heartbeat_at=long_ago)
    wait_until(lambda: Invocation.objects.get(pk=invocation.pk).heartbeat_at > long_ago, what="a heartbeat")
    reap_stale_work.run()
    assert status_of(invocation) == RunStatus.RUNNING

    thread.join(30)
    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "rested")


def test_a_redelivered_invocation_is_failed_not_run_twice(ready, alice):
    toolkit = ready(alice, HARNESS)
    invocation = invocation_create(toolkit=toolkit, tool="boom", arguments={}, user=alice)
    # What a worker that died mid-run leaves behind.
    Invocation.objects.filter(pk=invocation.pk).update(status=RunStatus.RUNNING)

    run_invocation.run(str(invocation.id))

    invocation.refresh_from_db()
    assert invocation.status == RunStatus.FAILED
    assert "worker" in invocation.error and invocation.traceback == ""


def test_the_same_invocation_delivered_twice_runs_once(ready, alice):
    """The reaper re-sends tasks that waited long (their message may be gone with the broker),
    so a second delivery can arrive while the first one runs, or after it finished: it must
    neither run the tool again nor fail the live run as a dead worker's."""
    toolkit = ready(alice, HARNESS)
    invocation = invocation_create(toolkit=toolkit, tool="nap", arguments={"seconds": 2}, user=alice)
    first = start_in_thread(invocation)
    wait_until(lambda: Event.objects.filter(invocation=invocation).exists(), what="the first delivery to run the tool")

    run_invocation.run(str(invocation.id))  # the second delivery, while the first runs

    assert status_of(invocation) == RunStatus.RUNNING
    first.join(30)
    run_invocation.run(str(invocation.id))  # and a third, after it finished
    invocation.refresh_from_db()
    assert (invocation.status, invocation.result, invocation.error) == (RunStatus.SUCCEEDED, "rested", "")
    assert [e.data["description"] for e in invocation.events.filter(type="status")] == ["napping"]


def test_a_finished_invocation_is_left_as_it_is(ready, alice):
    toolkit = ready(alice, example("string_reverse"))
    done = invoke(toolkit, "reverse_string", alice, string="abc")
    finished_at = done.finished_at

    run_invocation.run(str(done.id))

    done.refresh_from_db()
    assert (done.status, done.finished_at, done.result) == (RunStatus.SUCCEEDED, finished_at, "Wrong API key")


def test_a_message_taken_before_its_row_is_stored_waits_for_the_row_and_runs_it(ready, alice):
    # The web process sends the task just before it stores the row (invocation_create).
    toolkit = ready(alice, example("string_reverse"))
    invocation = Invocation(
        toolkit=toolkit, revision=toolkit.current_revision, tool="reverse_string", arguments={"string": "abc"}, user=alice
    )
    worker = start_in_thread(invocation)
    time.sleep(0.3)
    assert worker.is_alive()
    invocation.save()
    worker.join(60)

    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "Wrong API key")


def test_a_message_that_ran_another_call_first_still_runs_its_own_once_it_is_stored(ready, alice):
    """A message taken before its row was stored runs the call that is queued (another's,
    whose own message then finds nothing left): it must then run its own call when the row
    comes, or that call stays queued with no message left for it. Seen through the real
    server: 2 of 200 calls sent at once stayed queued until the next call came."""
    toolkit = ready(alice, example("string_reverse"))

    def call(text: str) -> Invocation:
        return Invocation(
            toolkit=toolkit, revision=toolkit.current_revision, tool="reverse_string", arguments={"string": text}, user=alice
        )

    late, early = call("abc"), call("xyz")
    early.save()
    worker = start_in_thread(late)  # late's message, before late's row
    wait_until(lambda: Invocation.objects.get(pk=early.pk).status == RunStatus.SUCCEEDED, timeout=60, what="early ran")
    assert worker.is_alive()
    late.save()
    worker.join(60)
    assert not worker.is_alive()
    late.refresh_from_db()
    assert late.status == RunStatus.SUCCEEDED
    # early's own message finds its call run already, and is done at once.
    started = time.monotonic()
    run_invocation.run(str(early.id))
    assert time.monotonic() - started < 1


def test_a_message_whose_row_never_comes_is_given_up_on(monkeypatch):
    monkeypatch.setattr(engine, "ROW_PATIENCE_SECONDS", 0.3)
    started = time.monotonic()
    run_invocation.run(str(uuid.uuid4()))
    assert 0.3 <= time.monotonic() - started < 5
    assert not Invocation.objects.exists()


# With a real worker process
# ------------------------------------------------------------------------------
# The toolkit is built in this process first and the worker started after it: start_worker
# purges the queue, so the worker does not also run the build and introspection tasks that
# the upload queued (the `worker` fixture would start it before the test could build).


def _descendants(root_pid: int) -> set[int]:
    """Every process below `root_pid`, by walking /proc's parent links."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: split after it.
        fields = text.rsplit(")", 1)[1].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _sandbox_user_pids() -> set[int]:
    users = ",".join(sandbox_user_names())
    result = subprocess.run(["ps", "-u", users, "-o", "pid="], capture_output=True, text=True, check=False)
    return {int(line) for line in result.stdout.split()}


@pytest.mark.worker
def test_an_api_call_with_wait_runs_end_to_end_on_a_real_worker(ready, alice, client, tmp_path):
    toolkit = ready(alice, example("library_lookup"))
    worker = start_worker(tmp_path)
    try:
        response = client.post(
            f"/api/v1/toolkits/{toolkit.slug}/tools/lookup/invoke",
            json.dumps({"arguments": {"word": "valve"}, "wait": True}),
            content_type="application/json", **bearer(alice),
        )
    finally:
        worker.kill()

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "succeeded", (body, worker.output()[-3000:])
    assert body["result"].startswith("valve:") and body["error"] is None
    assert [e["type"] for e in body["events"]].count("citation") == 1
    assert body["duration_ms"] is not None and body["finished_at"] is not None


@pytest.mark.worker
def test_a_worker_killed_mid_run_leaves_a_failed_invocation_and_no_process(ready, alice, client, tmp_path, monkeypatch):
    toolkit = ready(alice, HARNESS)
    worker = start_worker(tmp_path)
    try:
        response = client.post(
            f"/api/v1/toolkits/{toolkit.slug}/tools/nap/invoke",
            json.dumps({"arguments": {"seconds": 30}, "wait": False}),
            content_type="application/json", **bearer(alice),
        )
        assert response.status_code == 202
        invocation = Invocation.objects.get(pk=response.json()["id"])
        wait_until(lambda: Event.objects.filter(invocation=invocation).exists(), what="the tool to start")
        assert status_of(invocation) == RunStatus.RUNNING
        # The sandbox really is there, below the worker, running as the sandbox user.
        sandboxed = _descendants(worker.process.pid) & _sandbox_user_pids()
        assert sandboxed, worker.output()[-3000:]
        # ... as a uid leased from the pool, not the shared sandbox user.
        owners = {pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name for pid in sandboxed}
        assert len(owners) == 1 and owners.pop().startswith("toolhub-sb-"), owners
    finally:
        worker.kill()  # SIGKILL to the worker's whole process group

    # Nothing of the sandbox outlives the worker (bwrap dies with it and takes its pid
    # namespace along). Other test sessions on this machine may run sandboxes of their own,
    # so the check is on this session's processes and cgroup.
    wait_until(lambda: not (sandboxed & _sandbox_user_pids()), timeout=10, what="the sandbox to go")
    assert wait_for_no_sandbox_processes(timeout=5) == []

    # Still "running" until the reaper notices the silence.
    assert status_of(invocation) == RunStatus.RUNNING
    monkeypatch.setattr(heartbeat, "DEAD_AFTER_SECONDS", 1.0)
    time.sleep(1.5)
    reaped = reap_stale_work.run()

    assert reaped["invocations"] == 1
    invocation.refresh_from_db()
    assert invocation.status == RunStatus.FAILED
    assert invocation.error == "The worker running this invocation stopped before it finished."
    assert invocation.finished_at is not None and invocation.pending_call is None


@pytest.mark.worker
def test_a_queued_invocation_whose_message_is_gone_is_sent_again_and_runs(ready, alice, tmp_path):
    toolkit = ready(alice, example("string_reverse"))
    invocation = invocation_create(toolkit=toolkit, tool="reverse_string", arguments={"string": "abc"}, user=alice)
    # The invocation's message is gone, as it is when Redis restarts without persistence.
    purge_queues()
    long_ago = timezone.now() - timedelta(seconds=django_settings.TOOLHUB_RESEND_AFTER_SECONDS + 1)
    Invocation.objects.filter(pk=invocation.pk).update(sent_at=long_ago)
    assert reap_stale_work.run()["resent"] == {"invocations": 1, "builds": 0, "agent_runs": 0}
    worker = start_worker(tmp_path, purge=False)  # a worker that finds only the re-sent message
    try:
        wait_until(lambda: status_of(invocation) not in (RunStatus.QUEUED, RunStatus.RUNNING), what="the re-sent task to run")
    finally:
        worker.kill()
    invocation.refresh_from_db()
    assert (invocation.status, invocation.result, invocation.sends) == (RunStatus.SUCCEEDED, "Wrong API key", 2), worker.output()[-3000:]


LEAKY = '''
"""
title: Leaky
"""
from pydantic import BaseModel


class Tools:
    class Valves(BaseModel):
        api_key: str = ""

    class UserValves(BaseModel):
        password: str = ""


    async def leak(self, __user__: dict, __event_emitter__=None) -> str:
        import sys
        # A toolkit may print, emit or raise its secrets; ToolHub must not keep them.
        secrets = f"{self.valves.api_key} {__user__['valves'].password}"
        print("valves:", secrets, file=sys.stderr)
        await __event_emitter__({"type": "status", "data": {"description": secrets}})
        raise RuntimeError(f"leaking {secrets}")
'''


def test_a_runs_secrets_reach_only_its_sandbox(ready, alice, admin, caplog, client):
    """The valve values go to the sandbox's stdin and nowhere else: not the invocation
    record, its events, the API, the run page, or the worker's log, even when the tool
    prints, emits or raises them."""
    import logging

    caplog.set_level(logging.DEBUG)
    toolkit = ready(alice, LEAKY)
    store_values(toolkit=toolkit, values={"api_key": "admin-secret-9137"}, by=admin)
    store_values(toolkit=toolkit, values={"password": "alice-secret-2468"}, user=alice, by=alice)
    invocation = invoke(toolkit, "leak", alice)
    assert invocation.status == RunStatus.FAILED
    assert "leaking ******** ********" in invocation.error
    assert invocation.events.get().data == {"description": "******** ********"}
    client.force_login(alice)
    seen = [
        repr(Invocation.objects.filter(pk=invocation.pk).values().get()),
        repr(list(invocation.events.values())),
        client.get(f"/api/v1/invocations/{invocation.id}", **bearer(alice)).content.decode(),
        client.get(f"/invocations/{invocation.id}/").content.decode(),
        caplog.text,
    ]
    for text in seen:
        assert "admin-secret-9137" not in text
        assert "alice-secret-2468" not in text


WARM_PROBE = """
\"\"\"
title: Warm Probe
author: tests
description: Tells which process answered.
version: {version}
\"\"\"
import os


class Tools:
    def where(self) -> list:
        \"\"\"Which code and which process answered.\"\"\"
        return ["{version}", os.getpid(), os.getppid()]
"""


@pytest.mark.worker
def test_a_warm_worker_reuses_its_sandbox_and_never_runs_an_old_revision(
    ready, build, alice, client, tmp_path, monkeypatch
):
    from toolhub.toolkits.services import revision_upload

    toolkit = ready(alice, WARM_PROBE.replace("{version}", "1.0.0"))
    monkeypatch.setenv("TOOLHUB_SANDBOX_WARM", "1")
    worker = start_worker(tmp_path)

    def where() -> list:
        response = client.post(
            f"/api/v1/toolkits/{toolkit.slug}/tools/where/invoke",
            json.dumps({"arguments": {}, "wait": True}),
            content_type="application/json", **bearer(alice),
        )
        body = response.json()
        assert response.status_code == 200 and body["status"] == "succeeded", (body, worker.output()[-3000:])
        return json.loads(body["result"]) if isinstance(body["result"], str) else body["result"]

    try:
        first, second = where(), where()
        # Both answered by a child of the same fork server (pid 1 of one warm sandbox), each
        # in a process of its own.
        assert first[0] == second[0] == "1.0.0"
        assert first[2] == second[2] == 1 and first[1] != second[1]
        warm = {int(line.split()[0]) for line in _sandbox_lines("forkserver.py")}
        assert warm, "a warm sandbox should be idle between the calls"
        # A new revision mid-flight: the next call runs its code, on the same warm sandbox.
        revision_upload(toolkit=toolkit, source=WARM_PROBE.replace("{version}", "2.0.0"), user=alice)
        build(toolkit)
        third = where()
        assert third[0] == "2.0.0" and third[2] == 1
        assert {int(line.split()[0]) for line in _sandbox_lines("forkserver.py")} == warm
    finally:
        worker.kill()
    # The warm sandbox went with its worker.
    wait_until(lambda: not _sandbox_lines("forkserver.py"), timeout=10, what="the warm sandbox to go")


def _sandbox_lines(needle: str) -> list[str]:
    users = ",".join(sandbox_user_names())
    result = subprocess.run(["ps", "-u", users, "-o", "pid=,args="], capture_output=True, text=True, check=False)
    own = set(_descendants(os.getpid()))
    return [line for line in result.stdout.splitlines() if needle in line and int(line.split()[0]) in own]
