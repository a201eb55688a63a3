"""Starting and answering invocations."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from kombu.exceptions import OperationalError

from toolhub import broker, dbretry, plainsql
from toolhub.accounts.models import ClientCredential
from toolhub.messages import message as text_message
from toolhub.runs import notify
from toolhub.runs.models import FINISHED, Event, Invocation, RunStatus, Surface, error_fields
from toolhub.runs.tasks import run_invocation
from toolhub.toolkits import schema_forms
from toolhub.toolkits.models import Revision, Status, Toolkit


class InvocationRejected(Exception):
    """Carries the HTTP status the API answers with and a list of (message, field)."""

    def __init__(self, status: int, errors: list[tuple[str, str | None]], *, retry_after: int | None = None):
        super().__init__(errors[0][0] if errors else "")
        self.status = status
        self.errors = errors
        # With 429: seconds until the same call may be accepted (the API's Retry-After).
        self.retry_after = retry_after


ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_INPUT)
RATE_WINDOW = timedelta(seconds=60)


def check_fair_use(user: User) -> None:
    """Per user, whatever the surface: at most TOOLHUB_USER_MAX_ACTIVE invocations queued,
    running or waiting for an answer, and at most TOOLHUB_USER_INVOCATIONS_PER_MINUTE accepted
    in any 60 seconds. Raises InvocationRejected(429) with retry_after otherwise. The counts
    are read from the invocations themselves, so every web process sees the same ones."""
    active_limit = settings.TOOLHUB_USER_MAX_ACTIVE
    if active_limit > 0:
        active = Invocation.objects.filter(user=user, status__in=ACTIVE).count()
        if active >= active_limit:
            message = ngettext(
                "You already have %(n)d invocation queued or running; wait until it finishes.",
                "You already have %(n)d invocations queued or running; wait until one finishes.",
                active,
            ) % {"n": active}
            raise InvocationRejected(429, [(message, None)], retry_after=5)
    rate_limit = settings.TOOLHUB_USER_INVOCATIONS_PER_MINUTE
    if rate_limit > 0:
        now = timezone.now()
        recent = Invocation.objects.filter(user=user, created_at__gte=now - RATE_WINDOW)
        if recent.count() >= rate_limit:
            oldest = recent.order_by("-created_at").values_list("created_at", flat=True)[rate_limit - 1 : rate_limit].first()
            retry = max(1, math.ceil(((oldest or now) + RATE_WINDOW - now).total_seconds()))
            message = _("At most %(limit)d invocations a minute; try again in %(seconds)d s.") % {"limit": rate_limit, "seconds": retry}
            raise InvocationRejected(429, [(message, None)], retry_after=retry)


def tool_spec(revision: Revision, tool: str) -> dict | None:
    for spec in revision.tools or []:
        if spec.get("function", {}).get("name") == tool:
            return spec["function"]
    return None


def check_arguments(parameters: dict, arguments: object) -> list[tuple[str, str | None]]:
    """Validate arguments against a tool's JSON schema: (message, field) pairs, the field being
    the top-level argument concerned or None.

    The schema was written by the toolkit's author, so the checks of toolhub.toolkits.schema_forms
    are used: a broken schema, a bad regular expression or a remote `$ref` becomes an error
    message instead of a crash (or a fetch), and no message quotes a submitted value."""
    if not isinstance(arguments, dict):
        return [(_("The arguments must be a JSON object."), "arguments")]
    errors: list[tuple[str, str | None]] = []
    for name in arguments:
        # The runtime refuses these anyway; refusing them here keeps such a call from being
        # queued at all.
        if str(name).startswith("_"):
            errors.append((_("Names starting with an underscore are injected by ToolHub, not passed."), str(name)))
    found = schema_forms.validate(parameters or {"type": "object", "properties": {}}, arguments)
    for field, messages in found.items():
        for message in messages:
            errors.append((message, None if field == schema_forms.ALL_ERRORS else field))
    return errors


def not_ready_reason(toolkit: Toolkit) -> str:
    """Why the toolkit cannot run now, in the active language."""
    revision = toolkit.current_revision
    if revision is None:
        return _("The toolkit has no revision.")
    hints = {
        Status.AWAITING_APPROVAL: _("The toolkit is not ready: it is waiting for an admin to approve its packages."),
        Status.BUILDING: _("The toolkit is not ready: its environment is being built; try again in a moment."),
        Status.FAILED: _("The toolkit is not ready: its last build failed; see the Environment tab and retry."),
        Status.REJECTED: _("The toolkit is not ready: an admin rejected one of its packages."),
        Status.UPLOADED: _("The toolkit is not ready: it has not been built yet."),
    }
    reason = hints.get(Status(revision.status), _("The toolkit is not ready."))
    if revision.status_detail:
        reason = _("%(reason)s (%(detail)s)") % {"reason": reason, "detail": revision.detail_shown()}
    return reason


def invocation_create(
    *, toolkit: Toolkit, tool: str, arguments: object, user: User, messages: object = None, files: object = None,
    client: ClientCredential | None = None, surface: str = Surface.API, listen: bool = False, enqueue: bool = True,
) -> Invocation:
    """Queue a call of `tool`. With `listen`, for a caller that waits for the end (wait_for,
    serving.calls.follow): the invocation's notices are subscribed to before its row exists
    (notify.listen), and the subscription is the returned invocation's `listener` until a
    wait uses it. Without `enqueue` the row is stored and no task is sent: the caller runs it
    in its own worker (an agent run's tool calls, runs.engine.run)."""
    revision = toolkit.current_revision
    if revision is None or revision.status != Status.READY:
        raise InvocationRejected(409, [(not_ready_reason(toolkit), None)])
    spec = tool_spec(revision, tool)
    if spec is None:
        raise InvocationRejected(404, [(_("The toolkit has no tool named %(tool)s.") % {"tool": repr(tool)}, "tool")])
    errors = check_arguments(spec.get("parameters") or {}, arguments)
    if errors:
        raise InvocationRejected(400, errors)
    check_fair_use(user)
    invocation = Invocation(
        toolkit=toolkit, revision=revision, tool=tool, arguments=arguments, user=user,
        messages=messages or [], files=files or [], client=client, surface=surface,
    )
    if not enqueue:
        invocation.save(force_insert=True)
        return invocation
    listener = notify.listen(invocation.id) if listen else None
    # The task is sent before the row is stored: the worker's way to the run (the broker,
    # Celery, its process, the sandbox process forked ahead) then overlaps the INSERT and its
    # commit instead of following them. A worker that takes the message before the row is
    # visible waits for it (engine.run_next).
    try:
        broker.send(run_invocation.name, str(invocation.id))
    except (OperationalError, OSError) as exc:
        if listener is not None:
            listener.close()
        # Nothing may stay queued forever: a call no broker accepted is stored as ended.
        invocation.status = RunStatus.FAILED
        for name, value in error_fields(text_message("run.queue_failed")).items():
            setattr(invocation, name, value)
        invocation.finished_at = timezone.now()
        invocation.save(force_insert=True)
        raise InvocationRejected(503, [(_("No worker is available to run tools right now; try again later."), None)]) from exc
    try:
        invocation.save(force_insert=True)
    except BaseException:
        # The message is out: the worker that takes it finds no row and gives up on it.
        if listener is not None:
            listener.close()
        raise
    setattr(invocation, "listener", listener)  # noqa: B010 - not a model field
    return invocation


def wait_for(invocation: Invocation, *, seconds: float | None = None) -> Invocation:
    """Wait until the invocation finishes, waits for input, or the wait limit passes: woken by
    the worker's notification (``toolhub.runs.notify``), polling only without Redis."""

    sql, fields = _wait_read(connection.vendor)
    key = [plainsql.param(Invocation, "id", invocation.pk)]

    def read() -> None:
        row = plainsql.one_row(sql, key)
        if row is None:
            raise Invocation.DoesNotExist(f"invocation {invocation.pk} is gone")
        for name, value in zip(WAIT_FIELDS, plainsql.convert(row[:-1], fields), strict=True):
            setattr(invocation, name, value)
        setattr(invocation, "has_events", bool(row[-1]))  # noqa: B010 - not a model field

    def done(state: dict | None) -> bool:
        if state is not None and took_ended_state(invocation, state):
            return True
        # A dropped connection is replaced (once per read); the caller answers 202 with the
        # id if the database stays away, never 500 for an invocation that was accepted.
        dbretry.write(read, what=f"waiting for invocation {invocation.pk}")
        return invocation.status in FINISHED or invocation.status == RunStatus.AWAITING_INPUT

    notify.wait(
        invocation.pk, done, seconds=settings.TOOLHUB_INVOKE_WAIT_SECONDS if seconds is None else seconds,
        listener=take_listener(invocation),
    )
    return invocation


def take_listener(invocation: Invocation) -> Any:
    """The subscription invocation_create(listen=True) made for `invocation`, once (None after
    that, and for an invocation created without one)."""
    listener = getattr(invocation, "listener", None)
    invocation.listener = None  # type: ignore[attr-defined]
    return listener


def took_ended_state(invocation: Invocation, state: dict) -> bool:
    """Take an ended run's state from its notice (notify.ended_state), if it is one for `invocation`;
    whether it was (anything else, and the run then is read from the database)."""
    if set(state) != {*WAIT_FIELDS, "id", "has_events"} or state["id"] != str(invocation.pk):
        return False
    if state["status"] not in FINISHED or state["pending_call"] is not None or state["egress"] is not None:
        return False
    if not all(isinstance(state[n], str) for n in ("error", "limit", "finished_at")):
        return False
    try:
        started = None if state["started_at"] is None else datetime.fromisoformat(state["started_at"])
        finished = datetime.fromisoformat(state["finished_at"])
    except (TypeError, ValueError):
        return False
    for name in ("status", "result", "error", "limit", "pending_call", "egress"):
        setattr(invocation, name, state[name])
    invocation.started_at, invocation.finished_at = started, finished
    setattr(invocation, "has_events", bool(state["has_events"]))  # noqa: B010 - not a model field
    return True


# Only the fields a run changes that the answer shows (toolhub.api.schemas.InvocationOut):
# refreshing the foreign keys too would drop the toolkit and revision the caller already holds,
# and the answer would read them again; the rest would be read for nothing.
WAIT_FIELDS = ("status", "result", "error", "limit", "pending_call", "egress", "started_at", "finished_at")


@cache
def _wait_read(vendor: str) -> tuple[str, plainsql.Converters]:
    """The statement wait_for reads the invocation with (toolhub.plainsql: the ORM's version
    cost 0.6 ms a read, twice a call): WAIT_FIELDS and whether it has events yet, in the same
    statement, so the answer to a call that sent none (most) needs no query for them
    (`has_events`, read by InvocationOut)."""
    i_id = f"i.{plainsql.column(Invocation, 'id')}"
    select = ", ".join(f"i.{plainsql.column(Invocation, name)}" for name in WAIT_FIELDS)
    events = f"SELECT 1 FROM {plainsql.table(Event)} e WHERE e.{plainsql.column(Event, 'invocation')} = {i_id}"
    sql = f"SELECT {select}, EXISTS ({events}) FROM {plainsql.table(Invocation)} i WHERE {i_id} = %s"
    return sql, plainsql.converters(Invocation, "i", WAIT_FIELDS)


def invocation_respond(*, invocation: Invocation, value: object, declined: str = "") -> None:
    """Answer the question an invocation waits on. `declined` says why no real answer came (the
    value is then the no-answer value); the run's events record it."""
    answer: dict[str, Any] = {"value": value}
    if declined:
        answer["declined"] = declined[:500]
    updated = Invocation.objects.filter(
        pk=invocation.pk, status=RunStatus.AWAITING_INPUT, call_answer__isnull=True
    ).update(call_answer=answer)
    if not updated:
        raise InvocationRejected(409, [(_("The invocation is not waiting for an answer."), None)])


def can_cancel(*, invocation: Invocation, user: User) -> bool:
    """The invoker and admins may cancel a run."""
    return bool(user.is_authenticated and (invocation.user_id == user.pk or (user.is_active and user.is_staff)))


def invocation_cancel(*, invocation: Invocation, by: User) -> Invocation:
    """End an unfinished invocation as failed with "Cancelled by <user>.". Its worker notices
    within half a second (runs.engine.Heartbeat) and kills the sandbox; a queued one is never
    started. Raises InvocationRejected (403 for someone else's run, 409 when it has already
    finished) and returns the invocation as it is now."""
    if not can_cancel(invocation=invocation, user=by):
        raise InvocationRejected(403, [(_("Only the person who started the run and admins may cancel it."), None)])
    ended = (
        Invocation.objects.filter(pk=invocation.pk)
        .exclude(status__in=list(FINISHED))
        .update(
            status=RunStatus.FAILED,
            **error_fields(text_message("run.cancelled", user=by.get_username())),
            finished_at=timezone.now(),
            pending_call=None,
        )
    )
    invocation.refresh_from_db()
    if not ended:
        raise InvocationRejected(409, [(_("The invocation has already finished."), None)])
    return invocation
