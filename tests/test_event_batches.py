"""Events stored in batches: the engine's Recorder writes a tool's
events with one INSERT per batch instead of one per event, keeps them in order, and still
stores them promptly, so the live run page sees a tool that has gone quiet. The Recorder is
driven with the runtime's messages against the real database; the Heartbeat thread that
flushes a quiet run's events runs for real too."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.test_api_invocations import made_invocation, toolkit  # noqa: F401 - fixture
from tests.test_invocations import wait_until
from toolhub.runs import engine
from toolhub.runs.models import Event, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


def _event(n: int) -> dict:
    return {"kind": "event", "event": {"type": "status", "data": {"description": f"step {n}", "done": False}}}


def _inserts(queries) -> int:
    return sum(1 for q in queries if q["sql"].lstrip().upper().startswith("INSERT"))


def test_a_thousand_events_take_a_handful_of_inserts_and_stay_in_order(toolkit, carol, settings):  # noqa: F811
    invocation = made_invocation(toolkit, carol, status=RunStatus.RUNNING)
    recorder = engine.Recorder(invocation)
    with CaptureQueriesContext(connection) as queries:
        for n in range(1000):
            recorder(_event(n))
        recorder.flush()

    assert _inserts(queries.captured_queries) == 1000 // engine.EVENT_BATCH
    stored = list(Event.objects.filter(invocation=invocation).values_list("seq", "data"))
    assert [seq for seq, _ in stored] == list(range(1, 1001))
    assert [data["description"] for _, data in stored] == [f"step {n}" for n in range(1000)]


def test_a_quiet_tool_s_events_are_written_within_the_flush_interval(toolkit, carol):  # noqa: F811
    """One event and then silence: the Heartbeat thread writes it, not the end of the run."""
    invocation = made_invocation(toolkit, carol, status=RunStatus.RUNNING)
    recorder = engine.Recorder(invocation)
    with engine.Heartbeat(invocation.pk, flush=recorder.flush_if_due):
        recorder(_event(1))
        assert not Event.objects.filter(invocation=invocation).exists()
        started = time.monotonic()
        wait_until(lambda: Event.objects.filter(invocation=invocation).exists(), timeout=5, what="the event")
        waited = time.monotonic() - started
    assert waited < engine.EVENT_FLUSH_SECONDS + engine.CANCEL_CHECK_SECONDS + 0.5


def test_events_sent_before_a_question_are_stored_before_it_is_asked(toolkit, carol, settings):  # noqa: F811
    settings.TOOLHUB_EVENT_CALL_TIMEOUT = 0.2
    invocation = made_invocation(toolkit, carol, status=RunStatus.RUNNING)
    recorder = engine.Recorder(invocation)
    recorder(_event(1))
    reply = recorder({"kind": "call", "call_id": "c1", "event": {"type": "input", "data": {"title": "Name?"}}})
    assert reply["error"] == "timed out waiting for an answer"
    recorder.flush()
    assert list(Event.objects.filter(invocation=invocation).values_list("seq", "type")) == [
        (1, "status"), (2, "call_timeout"),
    ]

