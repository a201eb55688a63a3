"""The invocation engine: runs one queued invocation in the sandbox, stores its events as they
arrive, answers its `__event_call__`s, keeps its heartbeat, masks the run's secrets in
everything stored, and records how it ended. toolhub.runs.tasks hands it invocation ids."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

from django.conf import settings
from django.db.models import F, Model
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from toolhub import dbretry, heartbeat
from toolhub.heartbeat import Beat
from toolhub.messages import Message, as_written, message
from toolhub.packages import envbuild as envlib
from toolhub.runs import notify, queue
from toolhub.runs.models import BUSY, FINISHED, Event, Invocation, RunStatus, Surface, error_fields
from toolhub.runs.selectors import parse_invocation_id
from toolhub.sandbox import launcher as sandboxlib
from toolhub.sandbox.limits import StopRun
from toolhub.toolkits import sandboxing, tool_tests
from toolhub.toolkits.building import revision_environment
from toolhub.toolkits.models import Revision
from toolhub.toolkits.valves import admin_values_for_run, load_values, schema_secrets
from toolhub.vault.secret_fields import MASK

logger = logging.getLogger(__name__)

# How often a running invocation looks whether it was cancelled (the sandbox is then killed).
CANCEL_CHECK_SECONDS = 0.5
# At most this many queued invocations are sent again per pass of the reaper.
RESEND_BATCH = 1000
# Host time (event writes, heartbeats) credited to a run beyond its answer budget.
HOST_SLACK_SECONDS = 10.0
# Stored as written: no translation of it exists.
WORKER_STOPPED = as_written("The worker running this invocation stopped before it finished.")
# Events are written in batches of at most this many, at the latest this long after the first
# of a batch arrived (the run page polls every 500 ms).
EVENT_BATCH = 200
EVENT_FLUSH_SECONDS = 0.25


class Scrubber:
    """Masks the run's secret valve values in everything stored from it (events, result,
    error, traceback): a toolkit that prints or raises a user's secret must not carry it
    into the invocation record, which admins can read."""

    def __init__(self, request: dict | None = None, revision: Revision | None = None):
        found: set[str] = set()
        if request is not None and revision is not None:
            for values, schema in (
                (request.get("valves"), revision.valves_schema),
                (request.get("user_valves"), revision.user_valves_schema),
            ):
                for name in schema_secrets(schema):
                    value = (values or {}).get(name)
                    # Very short values would mask ordinary text and protect little.
                    if isinstance(value, str) and len(value) >= 4:
                        found.add(value)
        self.secrets = sorted(found, key=len, reverse=True)

    def __call__(self, value):
        if not self.secrets:
            return value
        if isinstance(value, str):
            for secret in self.secrets:
                value = value.replace(secret, MASK)
            return value
        if isinstance(value, dict):
            return {self(k): self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value


class Recorder:
    """Receives the runtime's messages for one invocation: stores events in batches,
    answers __event_call__ requests from the database, and keeps the heartbeat.

    Events are buffered and written with one INSERT per batch: when EVENT_BATCH of them are
    waiting, when the oldest has waited EVENT_FLUSH_SECONDS (checked as events arrive and by
    the Heartbeat thread, so a tool that goes quiet is still seen live), before a question is
    asked, and at the end of the run (engine.run flushes before recording the outcome)."""

    def __init__(self, invocation: Invocation, scrub: Scrubber | None = None, *, seq: int | None = None):
        self.scrub = scrub or Scrubber()
        self.invocation = invocation
        # `seq`: the events stored so far, when the caller knows (0 for a run just claimed).
        self.seq = invocation.events.count() if seq is None else seq
        self.beat = time.monotonic()
        # The buffer is shared with the Heartbeat thread, which flushes it when it is due.
        self._lock = threading.Lock()
        self._pending: list[Event] = []
        self._pending_since = 0.0
        # Fair use: what one invocation may send, and one budget for every wait for an answer
        # to `__event_call__` (so unanswered calls cannot hold a worker call after call).
        self.events = 0
        self.event_bytes = 0
        self.wait_budget = settings.TOOLHUB_EVENT_CALL_TIMEOUT

    def __call__(self, message: dict) -> dict | None:
        kind = message.get("kind")
        if kind == "event":
            event = message.get("event") or {}
            self._store(str(event.get("type", ""))[:40], event.get("data"))
        elif kind == "call":
            return self._ask(message)
        self._heartbeat()
        return None

    def _store(self, type_: str, data, *, counted: bool = True) -> None:
        data = self.scrub(data if data is not None else {})
        if counted:
            self.events += 1
            self.event_bytes += len(json.dumps(data, ensure_ascii=False, default=str).encode())
            if self.events > settings.TOOLHUB_MAX_EVENTS:
                raise StopRun("events")
            if self.event_bytes > settings.TOOLHUB_MAX_EVENT_BYTES:
                raise StopRun("event_bytes")
        with self._lock:
            self.seq += 1
            if not self._pending:
                self._pending_since = time.monotonic()
            self._pending.append(Event(invocation=self.invocation, seq=self.seq, type=self.scrub(type_), data=data))
            full = len(self._pending) >= EVENT_BATCH
        if full:
            self.flush()
        else:
            self.flush_if_due()

    def flush_if_due(self) -> None:
        if self._pending and time.monotonic() - self._pending_since >= EVENT_FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write the buffered events with one INSERT. They leave the buffer only once written:
        a write that fails (after dbretry's one reconnect) is tried again by the next flush."""
        with self._lock:
            batch = self._pending
            if not batch:
                return
            # (invocation, seq) is unique: a retry after a commit whose answer was lost fails
            # with IntegrityError, which dbretry takes for "already written".
            dbretry.write(
                lambda: Event.objects.bulk_create(batch),
                what=f"storing events {batch[0].seq}-{batch[-1].seq} of invocation {self.invocation.pk}",
            )
            self._pending = []

    def _heartbeat(self, force: bool = False) -> None:
        if force or time.monotonic() - self.beat > heartbeat.EVERY_SECONDS:
            self.beat = time.monotonic()
            dbretry.write(
                lambda: Invocation.objects.filter(pk=self.invocation.pk).update(heartbeat_at=timezone.now()),
                what=f"the heartbeat of invocation {self.invocation.pk}",
            )

    def _ask(self, message: dict) -> dict:
        call_id = message.get("call_id")
        event = self.scrub(message.get("event") or {})
        # What the tool sent before its question is on the page while the person answers.
        self.flush()
        # Only a running invocation starts waiting (and only a waiting one resumes below):
        # one the reaper has already ended must not come back to life.
        pk = self.invocation.pk
        dbretry.write(
            lambda: Invocation.objects.filter(pk=pk, status=RunStatus.RUNNING).update(
                status=RunStatus.AWAITING_INPUT, pending_call=event, call_answer=None
            ),
            what=f"the pending call of invocation {pk}",
        )
        notify.publish(self.invocation.pk)
        started = time.monotonic()
        deadline = started + max(0.0, min(settings.TOOLHUB_EVENT_CALL_TIMEOUT, self.wait_budget))
        answer = None
        while time.monotonic() < deadline:
            row = dbretry.write(
                lambda: Invocation.objects.filter(pk=pk).values("call_answer", "status").first(),
                what=f"reading the answer for invocation {pk}",
            )
            if row and row["call_answer"] is not None:
                answer = row["call_answer"]
                break
            if row is None or row["status"] in FINISHED:
                # Cancelled (or reaped) while waiting: the sandbox is about to be killed.
                return {"kind": "call_result", "call_id": call_id, "error": "the invocation was cancelled"}
            self._heartbeat()
            time.sleep(0.1)
        self.wait_budget -= time.monotonic() - started
        dbretry.write(
            lambda: Invocation.objects.filter(pk=pk, status=RunStatus.AWAITING_INPUT).update(
                status=RunStatus.RUNNING, pending_call=None, call_answer=None, heartbeat_at=timezone.now()
            ),
            what=f"resuming invocation {pk}",
        )
        if answer is None:
            waited = round(time.monotonic() - started)
            self._store("call_timeout", {"call": event, "seconds": waited}, counted=False)
            return {"kind": "call_result", "call_id": call_id, "error": "timed out waiting for an answer"}
        declined = answer.get("declined")
        self._store("call_answered", {"call": event, **({"declined": str(declined)[:500]} if declined else {})}, counted=False)
        return {"kind": "call_result", "call_id": call_id, "value": answer.get("value")}


class Heartbeat(Beat):
    """Beats for one invocation from a thread for as long as the worker works on it.

    A tool may run silently for its whole wall-clock limit (or the environment may take a
    while to build on this host), and the reaper must not take that silence for a dead
    worker: the beat comes from the worker, not from the tool's messages."""

    def __init__(self, invocation_id, *, flush: Callable[[], None] | None = None) -> None:
        self._invocation_id = invocation_id
        # Writes the run's buffered events once they are due (Recorder.flush_if_due).
        self._flush = flush
        self._last_beat = time.monotonic()
        # Set once the invocation was ended by someone else (cancelled, or reaped): the
        # sandbox watches it and is killed.
        self.cancelled = threading.Event()
        super().__init__(self._check, every=CANCEL_CHECK_SECONDS)

    def _check(self) -> None:
        if time.monotonic() - self._last_beat >= heartbeat.EVERY_SECONDS:
            self._last_beat = time.monotonic()
            dbretry.write(
                lambda: Invocation.objects.filter(
                    pk=self._invocation_id, status__in=[RunStatus.RUNNING, RunStatus.AWAITING_INPUT]
                ).update(heartbeat_at=timezone.now()),
                what=f"the heartbeat of invocation {self._invocation_id}",
            )
        if self._flush is not None:
            self._flush()
        if not self.cancelled.is_set() and Invocation.objects.filter(
            pk=self._invocation_id, status__in=list(FINISHED)
        ).exists():
            self.cancelled.set()


def run_next(woken_by: str) -> None:
    """What a worker does with an invocation's broker message. The message only says that work
    was queued: the worker runs the fairest queued invocation (fairest_queued), which is the
    message's own one unless another user has waited longer, so one user's flood of messages
    does not hold up everyone else's runs. Each invocation is queued with one message, and a
    message is done only when its own invocation is no longer queued (run, for this message or
    another's, or cancelled): a message that ran another's invocation takes again while its
    own still waits, so every queued invocation is run. A message delivered again after its
    worker died mid-run first ends that run, as the reaper would (tools may have side effects,
    so it is never run twice); one running with a fresh heartbeat is left alone. The message is
    sent just before its row is stored, so a take that finds nothing looks again while the row
    may still come (_RowPatience)."""
    woken = parse_invocation_id(woken_by)
    own = _RowPatience(woken)
    # The call's sandbox process is forked while the invocation is taken (most calls need the
    # environment the last one did); whatever does not use it kills it.
    with sandboxing.warm_ahead():
        while True:
            taken = _take(woken, own.id)
            if taken.abandoned:
                notify.publish(woken)
            # The message's own run was ended if it had been abandoned; only once.
            woken = None
            if taken.invocation is not None:
                _execute(taken.invocation)
                if own.is_run_by(taken.invocation.pk):
                    return
                # Another's invocation, taken while this message's own one was not stored yet
                # (its own message then finds nothing left): take again while the own one waits
                # (as the take found it: the next take looks again).
                if own.waits(taken.own):
                    continue
                own.log_if_given_up(woken_by)
                return
            if taken.chosen is None:
                if own.still_to_come(taken.own):
                    continue
                own.log_if_given_up(woken_by)
                return
            # Another worker claimed it first: choose again.


# A message is sent just before its invocation's row is stored (services.invocation_create),
# so a worker can take it first: it then waits this long at most for the row to appear.
ROW_PATIENCE_SECONDS = 5.0


class _RowPatience:
    """Whether a message whose take found nothing to run should look again because its own
    invocation is still to be run: its row does not exist yet (the web process is storing it)
    or it is still queued (stored after the take looked: the first time, look again at once).
    Otherwise each look comes after a pause that grows from 1 ms, for ROW_PATIENCE_SECONDS at
    most from the message's start. A row that never comes (its INSERT failed) is given up on;
    one that is running or ended needs nothing more."""

    def __init__(self, invocation_id) -> None:
        self._id = invocation_id
        self._deadline = time.monotonic() + ROW_PATIENCE_SECONDS
        self._pause = 0.001
        self._seen_queued = False
        self.gave_up = False

    def is_run_by(self, taken_id) -> bool:
        """Whether running `taken_id` was this message's whole work: it was its own invocation
        (or the message named none)."""
        if self._id is None or taken_id == self._id:
            self._id = None
            return True
        return False

    @property
    def id(self):
        """The message's own invocation while it is still to be run, else None."""
        return self._id

    def _state(self, found: tuple[Any, Any] | None) -> str | None:
        """"absent", "queued", or None when nothing is left for the message (its invocation
        is running or ended, or is a call the queue never takes: an agent run's or a tool
        test's, run by the worker of that run). `found`: its (status, surface) as the last take
        found it (queue.Taken.own); read now if that take did not say."""
        if found is None:
            found = dbretry.write(lambda: queue.own_state(self._id), what=f"looking for invocation {self._id}")
        status, surface = cast(tuple[Any, Any], found)
        if status is None:
            return "absent"
        if status != RunStatus.QUEUED or surface in queue.UNQUEUED_SURFACES:
            self._id = None
            return None
        return "queued"

    def _in_time(self, state: str, now: float) -> bool:
        if now < self._deadline:
            return True
        self.gave_up = state == "absent"
        return False

    def waits(self, found: tuple[Any, Any] | None = None) -> bool:
        """After running another's invocation: whether the message's own one is still to be
        run (queued, or not stored yet and the patience not spent), as the take found it. The
        patience counts from the message's start, so a message whose row never comes does not
        keep a worker process taking others' calls while they come."""
        if self._id is None:
            return False
        state = self._state(found)
        return state == "queued" or (state == "absent" and self._in_time(state, time.monotonic()))

    def still_to_come(self, found: tuple[Any, Any] | None = None) -> bool:
        """After a take that found nothing: whether to take again, after a pause while the row
        is not stored yet, at once the first time it is found queued."""
        if self._id is None:
            return False
        now = time.monotonic()
        state = self._state(found)
        if state is None:
            return False
        if state == "queued" and not self._seen_queued:
            # Stored after the take looked: take again at once, whatever the time (a pause
            # here, grown while the row was awaited, would cost the call up to 50 ms).
            self._seen_queued = True
            return True
        if not self._in_time(state, now):
            return False
        time.sleep(min(self._pause, self._deadline - now))
        self._pause = min(self._pause * 2, 0.05)
        return True

    def log_if_given_up(self, woken_by: str) -> None:
        if self.gave_up:
            logger.warning("no row for invocation %s came within %.0f s of its message", woken_by, ROW_PATIENCE_SECONDS)


def _take(woken, own=None) -> queue.Taken:
    """queue.take_next, with its time and, if its answer was lost with the connection, the
    claim it committed (and then no word of `own`)."""
    now = timezone.now()
    attempts = 0

    def take() -> queue.Taken:
        nonlocal attempts
        attempts += 1
        if attempts > 1 and (mine := queue.claimed_at(now)) is not None:
            # dbretry tried again after a dropped connection, and the first try had claimed
            # this one. Only then: two workers may read the clock in the same microsecond.
            return queue.Taken(False, mine.pk, mine)
        return queue.take_next(
            woken, now=now, silent_since=now - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS), error=WORKER_STOPPED, own=own,
        )

    # dbretry answers None only for an `already_done` error, and there is none here.
    return cast(queue.Taken, dbretry.write(take, what="taking the next invocation", already_done=None))


def fairest_queued():
    """The id of the queued invocation to run next, or None (toolhub.runs.queue.fairest_queued:
    the user with the fewest invocations running, then the one served longest ago, their
    oldest). Decided per waiting user, not per queued row: a subquery per row walked all of a
    user's invocations once for each of their queued ones (~200 ms a pick with 1,000 queued)."""
    return queue.fairest_queued()


def run(invocation_id: str) -> None:
    """Run this queued invocation in the sandbox and record everything it sends."""
    invocation, claimed = _claim(invocation_id)
    if invocation is None or invocation.is_finished:
        return
    if not claimed and _alive(invocation):
        # A second delivery while the first is still being run (the reaper re-sent a task
        # that had waited long, or the broker redelivered it): the first one owns the run.
        return
    if not claimed:
        # Redelivered after a worker died mid-run: tools may have side effects, so
        # the call is not run twice.
        _finish(invocation, RunStatus.FAILED, error=WORKER_STOPPED)
        return
    _execute(invocation)


def _claim(invocation_id: str) -> tuple[Invocation | None, bool]:
    """Take a queued invocation for this worker: the invocation (None if there is none by
    that id) and whether it is now ours."""
    # Claimed with one conditional UPDATE, not SELECT ... FOR UPDATE and a save: on SQLite a
    # transaction that reads and then writes fails at once with "database is locked" while
    # another connection writes (the busy timeout does not cover that upgrade), and a task
    # that failed here would leave its invocation queued until the reaper.
    now = timezone.now()
    attempts = 0

    def claim() -> bool:
        nonlocal attempts
        attempts += 1
        return queue.claim(invocation_id, now=now)

    claimed = dbretry.write(claim, what=f"claiming invocation {invocation_id}")
    invocation = dbretry.write(lambda: queue.load_for_run(invocation_id), what=f"loading invocation {invocation_id}")
    if (
        invocation is not None and not claimed and attempts > 1
        and invocation.status == RunStatus.RUNNING and invocation.started_at == now
    ):
        # The claim committed, but its answer was lost with the connection (dbretry tried it
        # again, and the second try found it claimed): it is ours. Only then: two workers that
        # race for the same invocation can read the clock in the same microsecond, and the
        # loser took the winner's claim for its own (both ran it, and another queued one was
        # never run: 3 of 1,000 in bench/load.py).
        claimed = True
    return invocation, bool(claimed)


def _abandoned(qs, now):
    """Of `qs`, the invocations running (or waiting for an answer) without a recent heartbeat."""
    return qs.filter(heartbeat_at__lt=now - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS), status__in=BUSY)


def _execute(invocation: Invocation) -> None:
    """Run a claimed invocation in the sandbox and record everything it sends."""
    invocation_id = invocation.pk
    try:
        request = _invoke_request(invocation)
    except Exception as exc:  # noqa: BLE001 - an accepted invocation must always end
        logger.exception("invocation %s could not be prepared", invocation_id)
        _finish(invocation, RunStatus.FAILED, error=message("run.internal_error", error=type(exc).__name__))
        return
    revision = invocation.revision
    scrub = Scrubber(request, revision)
    try:
        recorder = Recorder(invocation, scrub, seq=0)
        with Heartbeat(invocation.pk, flush=recorder.flush_if_due) as beating:
            env_dir = revision_environment(revision)
            # One hard deadline: the wall-clock limit, plus at most the answer budget (and a
            # little for the worker's own writes) spent waiting on the host.
            limits = dataclasses.replace(
                sandboxing.limits(), host_wait_seconds=settings.TOOLHUB_EVENT_CALL_TIMEOUT + HOST_SLACK_SECONDS
            )
            try:
                outcome = sandboxing.run(
                    revision=revision, env_dir=env_dir, request=request, on_message=recorder,
                    egress=sandboxing.egress_policy(invocation.toolkit, revision),
                    limits_=limits, warm=True, cancel=beating.cancelled,
                )
            finally:
                # Every event is stored before the run's end is.
                recorder.flush()
            if outcome.egress is not None:
                report = outcome.egress
                dbretry.write(
                    lambda: Invocation.objects.filter(pk=invocation.pk).update(egress=report),
                    what=f"the egress report of invocation {invocation.pk}",
                )
    except envlib.BuildFailed as exc:
        # Environments are built per host (from the stored lock): name the host that could not.
        host = settings.TOOLHUB_HOST_NAME
        _finish(invocation, RunStatus.FAILED, error=message("run.environment_failed_on", host=host, reason=exc.message))
        return
    except sandboxlib.SandboxUnavailable as exc:
        _finish(invocation, RunStatus.FAILED, error=as_written(str(exc)))
        return
    except dbretry.WriteFailed as exc:
        # The database went away for longer than one reconnect: say so, not "internal error".
        _finish(invocation, RunStatus.FAILED, error=message("run.not_recorded", error=str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - an accepted invocation must always end
        logger.exception("invocation %s crashed in the worker", invocation_id)
        _finish(invocation, RunStatus.FAILED, error=message("run.internal_error", error=type(exc).__name__))
        return
    del request

    def end(status: str, **fields) -> None:
        # The waiter is told the end itself, but not an egress report's (a jsonb column, whose
        # key order its read would give).
        _finish(invocation, status, events=None if outcome.egress is not None else recorder.seq, **fields)

    final = scrub(outcome.final or {})
    outcome.stderr_tail = scrub(outcome.stderr_tail)
    usage = {"cpu_ms": outcome.cpu_ms, "max_rss_kb": outcome.max_rss_kb}
    if outcome.status == "timed_out":
        timed_out = message("run.timed_out", seconds=float(settings.TOOLHUB_SANDBOX_WALL_SECONDS))
        end(RunStatus.TIMED_OUT, error=timed_out, limit=outcome.limit or "wall_time", **usage)
    elif outcome.status == "limit_exceeded" and outcome.limit in ("events", "event_bytes"):
        too_many = (
            message("run.too_many_events", count=settings.TOOLHUB_MAX_EVENTS) if outcome.limit == "events"
            else message("run.too_many_event_bytes", count=settings.TOOLHUB_MAX_EVENT_BYTES)
        )
        end(RunStatus.FAILED, error=too_many, limit=outcome.limit, **usage)
    elif outcome.status == "limit_exceeded":
        # A MemoryError or EFBIG still sends its final error line: keep its traceback.
        hit = message("run.sandbox_limit", limit=str(outcome.limit))
        end(RunStatus.FAILED, error=hit, limit=outcome.limit or "", traceback=final.get("traceback", ""), **usage)
    elif final.get("kind") == "result":
        end(RunStatus.SUCCEEDED, result=final.get("result"), result_type=final.get("result_type", "text"), **usage)
    elif final.get("kind") == "error":
        # The tool's own error, as it wrote it.
        own = as_written(str(final.get("error") or "The tool failed."))
        end(RunStatus.FAILED, error=own, traceback=final.get("traceback", ""), **usage)
    else:
        reason = sandboxing.outcome_reason(outcome) or as_written("The tool ended without a result.")
        end(RunStatus.FAILED, error=reason, traceback=outcome.stderr_tail, **usage)


def _alive(invocation: Invocation) -> bool:
    """Whether a worker beat for this invocation recently (it is being run right now)."""
    beat = invocation.heartbeat_at
    return beat is not None and beat > timezone.now() - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS)


def _invoke_request(invocation: Invocation) -> dict:
    """The request line for the runtime. Valve values are decrypted only here, into it; the
    admin's secret Valves only for a revision an admin uploaded or approved."""
    revision = invocation.revision
    user = invocation.user
    return {
        "op": "invoke",
        "source_path": "/opt/toolkit/toolkit.py",
        "tool": invocation.tool,
        "arguments": invocation.arguments,
        "valves": admin_values_for_run(toolkit=invocation.toolkit, revision=revision) if revision.valves_schema else None,
        "user_valves": _user_valves(invocation) if revision.user_valves_schema else None,
        "user": {"id": str(user.pk), "name": user.get_full_name() or user.username, "email": user.email,
                 "role": "admin" if user.is_staff else "user"},
        "metadata": {"toolkit": invocation.toolkit.slug, "revision": revision.number, "invocation": str(invocation.id)},
        "messages": invocation.messages,
        "files": invocation.files,
        "model": None,
        # Open WebUI passes the toolkit's id as __id__; the invocation id is in metadata.
        "id": invocation.toolkit.slug,
        "call_timeout": settings.TOOLHUB_EVENT_CALL_TIMEOUT,
    }


def _user_valves(invocation: Invocation) -> dict:
    """The invoker's UserValves; for a saved tool test's call, the test's own when it has some
    (docs/tool-tests.md)."""
    if invocation.surface == Surface.TEST:
        saved = tool_tests.saved_user_valves(invocation.pk)
        if saved is not None:
            return saved
    return load_values(toolkit=invocation.toolkit, user=invocation.user)


def _finish(
    invocation: Invocation, status: str, *, events: int | None = None, error: Message | None = None, **fields
) -> None:
    """Record how the invocation ended (once: a finished one is never changed). The result
    of a tool that ran is the one write that must not be lost to a dropped connection.
    `events`: how many the run stored, for a run this worker claimed; its waiter is then told
    the end itself (notify.ended_state). `error`: why it failed."""
    fields.setdefault("finished_at", timezone.now())
    if error is not None:
        fields |= error_fields(error)
    recorded = dbretry.write(
        lambda: queue.finish(invocation.pk, status, fields),
        what=f"recording the end ({status}) of invocation {invocation.pk}",
    )
    state = None
    if recorded and events is not None:
        state = notify.ended_state(invocation, status, fields, has_events=events > 0)
    notify.publish(invocation.pk, state)


def reap_stale_invocations() -> int:
    """End invocations whose worker died (running without a recent heartbeat) and those no
    worker took although their task was sent 1 + TOOLHUB_RESEND_MAX times; returns how many."""
    now = timezone.now()
    n_dead = _abandoned(Invocation.objects.all(), now).update(
        status=RunStatus.FAILED, finished_at=now, pending_call=None, **error_fields(WORKER_STOPPED)
    )
    resend_after = timedelta(seconds=settings.TOOLHUB_RESEND_AFTER_SECONDS)
    unclaimed = Invocation.objects.filter(
        status=RunStatus.QUEUED, sends__gt=settings.TOOLHUB_RESEND_MAX, sent_at__lt=now - resend_after
    )
    n_unclaimed = 0
    if unclaimed.exists():
        # The true reason: workers that were busy all along, or none serving the queue.
        busy = Invocation.objects.filter(started_at__gte=now - resend_after).exists()
        why = message("run.workers_busy") if busy else message("run.no_worker")
        not_taken = message("run.not_taken", count=settings.TOOLHUB_RESEND_MAX + 1, why=why)
        n_unclaimed = unclaimed.update(status=RunStatus.FAILED, finished_at=now, **error_fields(not_taken))
    return n_dead + n_unclaimed


def resend_queued_invocations(send: Callable[[str], None]) -> int:
    """Send the task of every invocation still queued TOOLHUB_RESEND_AFTER_SECONDS after its
    last send again: its message may be gone with a broker that restarted without persistence.
    A message that was not lost is then one too many, which is harmless: a message wakes a
    worker for the fairest queued invocation (run_next), and one that finds none is done; a
    second delivery for a running invocation leaves it alone. Returns how many were sent."""
    return resend_queued(Invocation, RunStatus.QUEUED, send, batch=RESEND_BATCH, what="invocation")


def resend_queued(model: type[Model], queued_status: str, send: Callable[[str], None], *, batch: int, what: str) -> int:
    """The re-send rule of every kind of queued work with a `sends` count and a `sent_at`
    (invocations here, agent runs in toolhub.agents.upkeep): the oldest `batch` rows of `model`
    still in `queued_status` TOOLHUB_RESEND_AFTER_SECONDS after their last send, sent at most
    TOOLHUB_RESEND_MAX times, are counted and sent again; a broker that refuses ends the pass
    (the next one tries again). Returns how many were sent."""
    now = timezone.now()
    rows = model._default_manager
    queued = rows.filter(
        status=queued_status, sends__lte=settings.TOOLHUB_RESEND_MAX,
        sent_at__lt=now - timedelta(seconds=settings.TOOLHUB_RESEND_AFTER_SECONDS),
    )
    ids = [str(pk) for pk in queued.order_by("created_at").values_list("pk", flat=True)[:batch]]
    rows.filter(pk__in=ids, status=queued_status).update(sent_at=now, sends=F("sends") + 1)
    for n, pk in enumerate(ids):
        try:
            send(pk)
        except (BrokerError, OSError) as exc:
            logger.error("could not send %s %s again (%s); the next pass tries again", what, pk, exc)
            return n
    return len(ids)
