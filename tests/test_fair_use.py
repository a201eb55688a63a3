"""Fair use per invocation: an event flood is stopped at the event cap
with a clear reason, well within the invocation's limit, and unanswered `__event_call__`s share
one answer budget, so six of them cannot hold a worker six times over."""

from __future__ import annotations

import time

import pytest

from tests.sandbox_fixtures import require_sandbox
from toolhub.runs.models import Event, RunStatus
from toolhub.runs.services import invocation_create
from toolhub.runs.tasks import run_invocation
from toolhub.sandbox.limits import Limits, StopRun
from toolhub.sandbox.session import RunState, classify
from toolhub.toolkits.models import Status

pytestmark = [pytest.mark.sandbox, pytest.mark.django_db(transaction=True)]

FLOOD = '''"""
title: Flood
author: tests
description: Sends far too much.
version: 1.0.0
"""


class Tools:
    def tiny_events(self, __event_emitter__=None) -> str:
        """Half a million tiny status events."""
        for n in range(500_000):
            __event_emitter__({"type": "status", "data": {"description": str(n), "done": False}})
        return "sent them all"

    def big_events(self, __event_emitter__=None) -> str:
        """Fewer, larger events."""
        for n in range(1000):
            __event_emitter__({"type": "message", "data": {"content": "x" * 60_000}})
        return "sent them all"

    async def six_questions(self, __event_call__=None) -> str:
        """Ask six questions nobody answers."""
        answers = []
        for n in range(6):
            answers.append(await __event_call__({"type": "input", "data": {"title": f"Q{n}", "message": "?"}}))
        return repr(answers)
'''


@pytest.fixture
def flood(upload, build, alice):
    require_sandbox()
    toolkit = build(upload(alice, FLOOD))
    assert toolkit.current_revision.status == Status.READY, toolkit.current_revision.status_detail
    return toolkit


def _run(toolkit, tool, user):
    invocation = invocation_create(toolkit=toolkit, tool=tool, arguments={}, user=user)
    started = time.monotonic()
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    return invocation, time.monotonic() - started


def test_an_event_flood_is_stopped_at_the_cap_with_a_clear_reason(flood, alice, settings):
    settings.TOOLHUB_MAX_EVENTS = 300
    invocation, elapsed = _run(flood, "tiny_events", alice)
    assert invocation.status == RunStatus.FAILED
    assert invocation.limit == "events"
    assert invocation.error == "The tool sent more than 300 events and was stopped."
    assert Event.objects.filter(invocation=invocation).count() == 300
    assert elapsed < settings.TOOLHUB_SANDBOX_WALL_SECONDS


def test_large_events_are_stopped_at_the_byte_cap(flood, alice, settings):
    settings.TOOLHUB_MAX_EVENT_BYTES = 1_000_000
    invocation, elapsed = _run(flood, "big_events", alice)
    assert (invocation.status, invocation.limit) == (RunStatus.FAILED, "event_bytes")
    assert "more than 1000000 bytes of events" in invocation.error
    assert Event.objects.filter(invocation=invocation).count() < 20
    assert elapsed < settings.TOOLHUB_SANDBOX_WALL_SECONDS


def test_unanswered_calls_share_one_answer_budget(flood, alice, settings):
    settings.TOOLHUB_EVENT_CALL_TIMEOUT = 2.0
    invocation, elapsed = _run(flood, "six_questions", alice)
    # Six calls of 2 s each took 12 s before; now all of them together wait at most 2 s.
    assert elapsed < 2.0 + 8, elapsed
    assert invocation.status == RunStatus.SUCCEEDED, invocation.error
    timeouts = Event.objects.filter(invocation=invocation, type="call_timeout").count()
    assert timeouts == 6


def test_a_stopped_run_is_classified_as_the_named_limit():
    state = RunState()
    state.killed_for = "events"
    assert classify(state=state, exit_code=137, stderr_tail="", oom=False, pids_hit=False, cpu_ms=1, limits=Limits())[:2] == (
        "limit_exceeded", "events",
    )
    assert StopRun("events").limit == "events"
