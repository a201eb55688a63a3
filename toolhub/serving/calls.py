"""One tool call from an LLM app: create the invocation through toolhub.runs.services (the
same validation, queue and sandbox as the API), follow it, answer its questions, and wait for
its end. MCP and the OpenAPI tool servers both call `serve_call`."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from toolhub import dbretry
from toolhub.accounts.clients import Caller
from toolhub.runs import notify
from toolhub.runs import services as run_services
from toolhub.runs.models import FINISHED, Event, Invocation, RunStatus
from toolhub.serving.catalog import ServedTool
from toolhub.serving.limits import check_rate

logger = logging.getLogger(__name__)

# What a tool gets when its question cannot be put to anyone (the client does not support
# elicitation, or declined): the same values the runtime gives on a timeout.
NO_ANSWER_INPUT = {"error": "The client cannot answer questions."}


def no_answer(call: dict) -> Any:
    return False if (call or {}).get("type") == "confirmation" else NO_ANSWER_INPUT


@dataclass
class CallOutcome:
    invocation: Invocation
    events: list[Event] = field(default_factory=list)
    # Stopped at a question that a later request will answer.
    waiting: bool = False
    # The last event sequence number seen.
    seen: int = 0

    @property
    def finished(self) -> bool:
        return self.invocation.status in FINISHED

    @property
    def ok(self) -> bool:
        return self.invocation.status == RunStatus.SUCCEEDED

    def error_text(self) -> str:
        inv = self.invocation
        if not self.finished:
            return f"The tool is still running after {settings.TOOLHUB_SERVE_WAIT_SECONDS:.0f} s (invocation {inv.id})."
        return inv.error or "The tool failed."


class Declined(LookupError):
    """An `ask` whose question got no usable answer (declined, cancelled, an error): the tool
    gets the no-answer value at once, and the events say why."""

    NO_ANSWER = "The client gave no answer."


class WaitBroken(Exception):
    """The database went away (and stayed away after one reconnect) while following an
    accepted invocation: it may still run. The caller answers with its id and last known
    status, as the API's `wait: true` does, never with an error that invites a second call."""

    def __init__(self, invocation: Invocation) -> None:
        super().__init__(f"the database became unavailable while waiting for invocation {invocation.pk}")
        self.invocation = invocation

    def message(self) -> str:
        inv = self.invocation
        return (f"The database became unavailable while waiting for this tool; it was accepted and may still be "
                f"running (invocation {inv.pk}, {inv.status}). Look it up later instead of calling it again.")


class NeedsInput(Exception):
    """Raised by an `ask` that cannot answer now but can in a later request (MCP 2026-07-28:
    the server answers `input_required` and the client retries the call with the answer)."""


def serve_call(
    *, caller: Caller, served: ServedTool, arguments: object, surface: str,
    ask: Callable[[dict], Any] | None = None, on_event: Callable[[Event], None] | None = None,
) -> CallOutcome:
    """Run the tool as the caller and wait for it.

    `ask(call)` answers an `__event_call__` (MCP elicitation) and returns the value, raises
    LookupError for "no answer", or NeedsInput to stop following (the outcome is then
    unfinished, with the invocation awaiting input); without `ask` every question gets
    `no_answer` at once. `on_event(event)` sees each event as it is stored (progress
    notifications). Raises run_services.InvocationRejected before anything runs (arguments,
    not ready, no broker)."""
    check_rate(caller)
    invocation = run_services.invocation_create(
        toolkit=served.toolkit, tool=served.tool, arguments=arguments, user=caller.user,
        client=caller.client, surface=surface, listen=on_event is None,
    )
    return follow(invocation, ask=ask, on_event=on_event)


def follow(
    invocation: Invocation, *, seen: int = 0, ask: Callable[[dict], Any] | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> CallOutcome:
    """Follow an accepted invocation until it ends (or the serve wait limit passes). A dropped
    database connection is replaced once per look (toolhub.dbretry); raises WaitBroken when
    the database stays away."""
    try:
        return _follow(invocation, seen=seen, ask=ask, on_event=on_event)
    except DatabaseError as exc:
        logger.warning("invocation %s: could not follow it (%s)", invocation.pk, str(exc).strip())
        dbretry.reconnect()
        raise WaitBroken(invocation) from exc


def _follow(
    invocation: Invocation, *, seen: int, ask: Callable[[dict], Any] | None, on_event: Callable[[Event], None] | None,
) -> CallOutcome:
    deadline = time.monotonic() + settings.TOOLHUB_SERVE_WAIT_SECONDS
    events: list[Event] = []
    delay = 0.01
    listener = run_services.take_listener(invocation)
    if listener is not None:
        # Subscribed before the invocation existed: nothing can have happened to it that the
        # first look would see, so the first look waits for the worker's notice.
        ended: dict | None = None

        def noticed(state: dict | None) -> bool:
            nonlocal ended
            ended = state if state is not None else ended
            return _noticed(invocation.pk, state)

        notify.wait(invocation.pk, noticed, seconds=deadline - time.monotonic(), listener=listener)
        # A notice that carries the end of a run without events is the whole outcome, as for
        # the API's `wait: true` (runs.services.wait_for): no look at the row and its events.
        if ended is not None and not ended.get("has_events", True) and run_services.took_ended_state(invocation, ended):
            return CallOutcome(invocation=invocation, events=events, seen=seen)
    while True:
        fresh = dbretry.write(
            functools.partial(_look, invocation, seen), what=f"following invocation {invocation.pk}", already_done=None
        ) or []
        for event in fresh:
            seen = event.seq
            events.append(event)
            if on_event is not None:
                on_event(event)
        if invocation.status in FINISHED:
            break
        # A question not yet answered (after an answer, the worker takes a moment to resume).
        if invocation.status == RunStatus.AWAITING_INPUT and invocation.pending_call is not None and invocation.call_answer is None:
            call = invocation.pending_call
            declined = ""
            try:
                if ask is None:
                    raise Declined("The client cannot answer questions.")
                value = ask(call)
            except LookupError as exc:
                value, declined = no_answer(call), str(exc) or Declined.NO_ANSWER
            except NeedsInput:
                return CallOutcome(invocation=invocation, events=events, waiting=True, seen=seen)
            answer(invocation, value, declined=declined)
            delay = 0.01
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if on_event is None and settings.REDIS_URL:
            # Nothing to relay before the end or a question: wait for the worker's notice on
            # Redis (toolhub.runs.notify) instead of polling.
            # A notice that carries the end needs no query of its own: the loop reads the row.
            notify.wait(invocation.pk, lambda state: _noticed(invocation.pk, state), seconds=remaining)
            continue
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)
    return CallOutcome(invocation=invocation, events=events, seen=seen)


def _look(invocation: Invocation, seen: int) -> list[Event]:
    """The invocation's state and its events after `seen`."""
    invocation.refresh_from_db(fields=["status", "result", "result_type", "error", "pending_call", "call_answer", "finished_at", "started_at", "limit"])
    return list(Event.objects.filter(invocation=invocation, seq__gt=seen).order_by("seq"))


def _noticed(invocation_id: Any, state: dict | None) -> bool:
    return (state or {}).get("status") in FINISHED or _needs_attention(invocation_id)


def _needs_attention(invocation_id: Any) -> bool:
    row = Invocation.objects.filter(pk=invocation_id).values("status", "call_answer").first()
    if row is None or row["status"] in FINISHED:
        return True
    return row["status"] == RunStatus.AWAITING_INPUT and row["call_answer"] is None


def answer(invocation: Invocation, value: Any, *, declined: str = "") -> None:
    try:
        run_services.invocation_respond(invocation=invocation, value=value, declined=declined)
    except run_services.InvocationRejected:
        pass  # It timed out or was answered meanwhile; following it shows what happened.
