"""The invocation queue as a worker sees it: which queued invocation runs next, ending one whose
worker died, loading a claimed one with what running it needs, and recording how it ended.

These run once or more for every tool call, and each is one plain SQL statement. Built with the
ORM they cost 0.7-4 ms each on this kind of machine, because Django compiles the query anew
every time: the four grouped queries that chose the fairest invocation took 4.1 ms, loading the
invocation with its revision, toolkit and user through ``select_related`` 3.3 ms, and recording
the end twice the CPU of the plain statement, while PostgreSQL answers each in well under a
millisecond. bench/invoke.py's stage split showed ~10 ms of them before the worker's sandbox
call began. The statements are made once per connection vendor from the models' metadata, and
rows are converted as the ORM would (toolhub.plainsql), so a changed model changes them too, and
they run unchanged on PostgreSQL and SQLite.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, cast

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Model

from toolhub import plainsql
from toolhub.messages import Message
from toolhub.plainsql import Part, column, field, instances, marks, one_row, param, table
from toolhub.runs.models import BUSY, FINISHED, Invocation, RunStatus, Surface, error_fields
from toolhub.toolkits.models import Revision, Toolkit

# Columns of a revision a run does not read, and which may be large (the source is up to 512
# KiB and reaches the sandbox from a file named by its hash; a build log can be longer): left
# out of the load, they are read from the database only if something asks for them.
LEFT_OUT: dict[type[Model], frozenset[str]] = {Revision: frozenset({"source", "build_log", "traceback", "description"})}


def _fair_ctes() -> str:
    """The CTEs that choose the user whose turn it is (`chosen`), and that user's oldest queued
    invocation (`pick`); their placeholders are _fair_params()'s, in order."""
    inv = table(Invocation)
    user, status, surface = (column(Invocation, n) for n in ("user", "status", "surface"))
    created, started, pk = (column(Invocation, n) for n in ("created_at", "started_at", "id"))
    # Decided per waiting user (never per queued row), from the queued and the running rows
    # (the status index) and each waiting user's last start (MAX over the (user, started_at)
    # index). The queued and running rows are counted from the status index: by user, a
    # planner without statistics (a new table) walked each user's whole history, ~0.5 ms a
    # pick per 600 past runs (its MAX still does, until the table is analyzed). `turns` is made
    # once: inlined, its MAX was evaluated once for each use in the ORDER BY.
    return f"""
        queued AS (
            SELECT {pk} AS id, {user} AS user_id, {created} AS created_at FROM {inv}
            WHERE {status} = %s AND {surface} NOT IN (%s, %s)
        ), busy AS (
            SELECT {user} AS user_id, COUNT(*) AS n FROM {inv} WHERE {status} IN ({marks(BUSY)}) GROUP BY {user}
        ), waiting AS (
            SELECT user_id, MIN(created_at) AS first_at FROM queued GROUP BY user_id
        ), turns AS MATERIALIZED (
            SELECT w.user_id, w.first_at, COALESCE(b.n, 0) AS busy,
                (SELECT MAX(s.{started}) FROM {inv} s WHERE s.{user} = w.user_id) AS last_at
            FROM waiting w LEFT JOIN busy b ON b.user_id = w.user_id
        ), chosen AS (
            SELECT user_id FROM turns
            ORDER BY busy, CASE WHEN last_at IS NULL THEN 0 ELSE 1 END, COALESCE(last_at, first_at), first_at, user_id
            LIMIT 1
        ), pick AS (
            SELECT q.id FROM queued q WHERE q.user_id = (SELECT user_id FROM chosen) ORDER BY q.created_at LIMIT 1
        )"""


# Agent runs' and tool tests' calls are run by the worker of their run, never taken here.
UNQUEUED_SURFACES = (Surface.AGENT, Surface.TEST)


def _fair_params() -> list[Any]:
    return [RunStatus.QUEUED.value, *(surface.value for surface in UNQUEUED_SURFACES), *(status.value for status in BUSY)]


@cache
def _fairest_sql(vendor: str) -> str:
    return f"WITH {_fair_ctes()} SELECT id FROM pick"


def fairest_queued():
    """The id of the queued invocation to run next, or None: that of the user with the fewest
    invocations running, then of the user served longest ago (never served first), their
    oldest. An agent run's tool calls are run by the agent's own worker, not from the queue."""
    row = one_row(_fairest_sql(connection.vendor), _fair_params())
    if row is None:
        return None
    return Invocation._meta.pk.to_python(row[0])


@cache
def _abandoned_sql(vendor: str) -> str:
    names = ("id", "status", "finished_at", "pending_call", "error", "error_message", "heartbeat_at")
    c = {n: column(Invocation, n) for n in names}
    return (
        f"UPDATE {table(Invocation)} SET {c['status']} = %s, {c['finished_at']} = %s, {c['pending_call']} = NULL, "
        f"{c['error']} = %s, {c['error_message']} = %s WHERE {c['id']} = %s AND {c['status']} IN ({marks(BUSY)}) "
        f"AND ({c['heartbeat_at']} IS NULL OR {c['heartbeat_at']} < %s)"
    )


def _abandoned_params(pk, *, now: datetime, silent_since: datetime, error: Message) -> list[Any]:
    fields = error_fields(error)
    return [
        RunStatus.FAILED.value, param(Invocation, "finished_at", now),
        fields["error"], field(Invocation, "error_message").get_db_prep_save(fields["error_message"], connection),
        param(Invocation, "id", pk),
        *(status.value for status in BUSY), param(Invocation, "heartbeat_at", silent_since),
    ]


def end_if_abandoned(pk, *, now: datetime, silent_since: datetime, error: Message) -> bool:
    """Fail the invocation `pk` if it is running (or waiting for an answer) without a heartbeat
    since `silent_since`; whether it was."""
    params = _abandoned_params(pk, now=now, silent_since=silent_since, error=error)
    with plainsql.cursor() as cursor:
        cursor.execute(_abandoned_sql(connection.vendor), params)
        return cursor.rowcount > 0


def _load_parts() -> tuple[Part, ...]:
    """The columns a run reads of an invocation (aliased `i`), its revision (`r`), toolkit (`t`)
    and user (`u`)."""
    user_model = get_user_model()
    return tuple(
        Part.of(model, alias, {f.attname for f in model._meta.concrete_fields} - LEFT_OUT.get(model, frozenset()))
        for model, alias in ((Invocation, "i"), (Revision, "r"), (Toolkit, "t"), (user_model, "u"))
    )


def _joins() -> str:
    """The joins from an invocation `i` to its revision, toolkit and user."""
    user_model = get_user_model()
    return (
        f"JOIN {table(Revision)} r ON r.{column(Revision, 'id')} = i.{column(Invocation, 'revision')} "
        f"JOIN {table(Toolkit)} t ON t.{column(Toolkit, 'id')} = i.{column(Invocation, 'toolkit')} "
        f"JOIN {table(user_model)} u ON u.{column(user_model, user_model._meta.pk.name)} = i.{column(Invocation, 'user')}"
    )


def _attached(row, parts: tuple[Part, ...]) -> Invocation:
    invocation, revision, toolkit, user = cast(tuple[Invocation, Revision, Toolkit, Any], tuple(instances(row, parts)))
    invocation.revision, invocation.toolkit, invocation.user = revision, toolkit, user
    revision.toolkit = toolkit
    return invocation


@cache
def _load_statement(vendor: str) -> tuple[str, tuple[Part, ...]]:
    """SELECT of an invocation joined with its revision, toolkit and user, and its parts."""
    parts = _load_parts()
    sql = (
        f"SELECT {', '.join(part.select() for part in parts)} FROM {table(Invocation)} i {_joins()} "
        f"WHERE i.{column(Invocation, 'id')} = %s"
    )
    return sql, parts


def load_for_run(pk) -> Invocation | None:
    """The invocation `pk` with its revision, toolkit and user attached (one query), or None.
    The revision's large text columns (LEFT_OUT) are deferred."""
    sql, parts = _load_statement(connection.vendor)
    row = one_row(sql, [param(Invocation, "id", pk)])
    return None if row is None else _attached(row, parts)


@dataclass(frozen=True)
class Taken:
    """What one try at taking the next invocation from the queue found."""

    abandoned: bool  # the message's own invocation was ended: it ran without a heartbeat
    chosen: Any  # the id of the fairest queued invocation; None if nothing was queued
    invocation: Invocation | None  # that invocation, claimed by this try and loaded (None: another worker's)
    # The (status, surface) of the invocation take_next was asked about (`own`) as this try
    # found it before claiming anything, (None, None) if it had no row yet; None if not asked.
    own: tuple[Any, Any] | None = None


@cache
def _claim_sql(vendor: str, which: str = "%s") -> str:
    """The claim of the invocation whose id is `which` (a placeholder, or a subquery)."""
    status, started, beat, pk = (column(Invocation, n) for n in ("status", "started_at", "heartbeat_at", "id"))
    return f"UPDATE {table(Invocation)} SET {status} = %s, {started} = %s, {beat} = %s WHERE {pk} = {which} AND {status} = %s"


def _claim_params(now: datetime) -> list[Any]:
    return [RunStatus.RUNNING.value, param(Invocation, "started_at", now), param(Invocation, "heartbeat_at", now)]


def claim(pk, *, now: datetime) -> bool:
    """Take the queued invocation `pk` for this worker, started at `now`; whether it was taken
    (not when another worker took it first, or it is not queued)."""
    with plainsql.cursor() as cursor:
        cursor.execute(_claim_sql(connection.vendor), [*_claim_params(now), param(Invocation, "id", pk), RunStatus.QUEUED.value])
        return cursor.rowcount > 0


@cache
def _take_statement(vendor: str) -> tuple[str, tuple[Part, ...]]:
    """PostgreSQL's one statement for take_next: ending the message's own invocation if it was
    abandoned, choosing the fairest queued one, claiming it and loading it (the claim's UPDATE
    re-checks `status` on the row's newest version, so of two workers that chose the same one,
    only one claims it). Each sub-statement of a WITH sees the same snapshot, and the abandoned
    invocation is a running one, never the one claimed."""
    parts = _load_parts()
    abandoned = _abandoned_sql(vendor) + f" RETURNING {column(Invocation, 'id')}"
    claimed = _claim_sql(vendor, "(SELECT id FROM pick)") + " RETURNING *"
    inv, status, surface, pk = table(Invocation), *(column(Invocation, n) for n in ("status", "surface", "id"))
    sql = (
        f"WITH abandoned AS ({abandoned}), {_fair_ctes()}, claimed AS ({claimed}) "
        f"SELECT (SELECT COUNT(*) FROM abandoned), (SELECT id FROM pick), "
        f"(SELECT {status} FROM {inv} WHERE {pk} = %s), (SELECT {surface} FROM {inv} WHERE {pk} = %s), "
        f"{', '.join(part.select() for part in parts)} "
        f"FROM (SELECT 1) AS one LEFT JOIN (claimed i {_joins()}) ON TRUE"
    )
    return sql, parts


def own_state(pk) -> tuple[Any, Any]:
    """The (status, surface) of the invocation `pk`, (None, None) if it has no row."""
    row = Invocation.objects.filter(pk=pk).values_list("status", "surface").first()
    return (None, None) if row is None else (row[0], row[1])


def take_next(woken_by, *, now: datetime, silent_since: datetime, error: Message, own: Any = None) -> Taken:
    """One try at what a worker does with an invocation's message: end the message's own
    invocation (`woken_by`, or None) if it is running without a heartbeat since `silent_since`
    (its worker died: failed with `error`), then choose the fairest queued invocation
    (fairest_queued) and claim it at `now`, loaded for its run (load_for_run). With `own` (the
    message's own invocation while it is still to be run), how the try found that one too
    (Taken.own), so the worker need not ask again.

    One statement on PostgreSQL: built of four, this took ~2.8 ms of the worker's time for a
    call, mostly Python and round trips (bench/invoke.py, the queue stage). SQLite has no UPDATE
    inside a WITH, so there it is those four statements."""
    if connection.vendor != "postgresql":
        ended = woken_by is not None and end_if_abandoned(woken_by, now=now, silent_since=silent_since, error=error)
        found = None if own is None else own_state(own)
        chosen = fairest_queued()
        if chosen is None:
            return Taken(ended, None, None, found)
        return Taken(ended, chosen, load_for_run(chosen) if claim(chosen, now=now) else None, found)
    sql, parts = _take_statement(connection.vendor)
    own_key = None if own is None else param(Invocation, "id", own)
    params = [
        *_abandoned_params(woken_by, now=now, silent_since=silent_since, error=error),
        *_fair_params(),
        *_claim_params(now), RunStatus.QUEUED.value,
        own_key, own_key,
    ]
    # Always one row: the statement's FROM is one row LEFT JOINed to what it claimed.
    row = cast(tuple[Any, ...], one_row(sql, params))
    ended, chosen, own_status, own_surface, rest = row[0], row[1], row[2], row[3], row[4:]
    invocation = None if rest[0] is None else _attached(rest, parts)
    chosen = None if chosen is None else Invocation._meta.pk.to_python(chosen)
    return Taken(bool(ended), chosen, invocation, None if own is None else (own_status, own_surface))


def claimed_at(now: datetime) -> Invocation | None:
    """The one invocation claimed at exactly `now` and not beaten since, loaded for its run, if
    there is exactly one: a claim whose answer was lost with its connection (two workers may
    read the clock in the same microsecond, so only ask this of a try that dbretry repeated)."""
    status, started, beat, pk = (column(Invocation, n) for n in ("status", "started_at", "heartbeat_at", "id"))
    with plainsql.cursor() as cursor:
        cursor.execute(
            f"SELECT {pk} FROM {table(Invocation)} WHERE {status} = %s AND {started} = %s AND {beat} = %s LIMIT 2",
            _claim_params(now),
        )
        rows = cursor.fetchall()
    return load_for_run(rows[0][0]) if len(rows) == 1 else None


@cache
def _finish_sql(vendor: str, names: tuple[str, ...]) -> str:
    assignments = ", ".join(f"{column(Invocation, name)} = %s" for name in names)
    status, pk, pending = (column(Invocation, n) for n in ("status", "id", "pending_call"))
    return (
        f"UPDATE {table(Invocation)} SET {status} = %s, {pending} = NULL, {assignments} "
        f"WHERE {pk} = %s AND {status} NOT IN ({marks(FINISHED)})"
    )


def finish(pk, status: str, fields: dict[str, Any]) -> bool:
    """Record that the invocation `pk` ended with `status` and `fields` (its result, error,
    usage, finished_at...), unless it has already ended; whether it was recorded now."""
    names = tuple(sorted(fields))
    params = [
        status,
        *(field(Invocation, name).get_db_prep_save(fields[name], connection) for name in names),
        param(Invocation, "id", pk),
        *sorted(status.value for status in FINISHED),
    ]
    with plainsql.cursor() as cursor:
        cursor.execute(_finish_sql(connection.vendor, names), params)
        return cursor.rowcount > 0
