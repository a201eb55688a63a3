"""Reads of invocations, shared by the pages and the API."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db.models import Q, QuerySet
from django.http import Http404

from toolhub import keyset
from toolhub.accounts.roles import is_admin
from toolhub.runs.models import Event, Invocation, RunStatus, Surface

# The most events one API page (and the inline list of an invocation) holds.
EVENTS_PAGE_MAX = 1000


def parse_invocation_id(value) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def get_invocation_for_user(*, user, invocation_id, client=None) -> Invocation:
    """The one way pages and endpoints fetch an invocation: its invoker and admins see it,
    nobody else learns it exists. Through a client credential (`client`), only the
    invocations that credential started for that same person, whoever the person is."""
    pk = parse_invocation_id(invocation_id)
    invocation = Invocation.objects.select_related("toolkit", "revision", "user", "client").filter(pk=pk).first() if pk else None
    if invocation is None:
        raise Http404
    if client is not None:
        if invocation.client_id != client.pk or invocation.user_id != user.pk:
            raise Http404
    elif not (is_admin(user) or invocation.user_id == user.pk):
        raise Http404
    return invocation


def invocations_recent(*, user, toolkit, limit: int = 10) -> QuerySet[Invocation]:
    """A toolkit's latest runs on its Tools tab: everyone's for admins, else the user's own.
    Each row shows its toolkit and user, so both are joined."""
    qs = Invocation.objects.filter(toolkit=toolkit).select_related("user", "toolkit").defer("result", "traceback")
    if not is_admin(user):
        qs = qs.filter(user=user)
    return qs[:limit]


def invocations_history(
    *, toolkit: str = "", user: str = "", status: str = "", tool: str = "", client: str = "", surface: str = "",
    since: datetime | None = None,
) -> QuerySet[Invocation]:
    """Every invocation for the admins' history page and the API's list, newest first, filtered
    by toolkit slug, username, status, tool name, client credential name, surface and creation
    time (an empty filter, or an unknown status or surface, filters nothing). Rows never load
    results, tracebacks or the revision's source, lock and build log."""
    qs = Invocation.objects.select_related("toolkit", "user", "revision", "client").defer(
        "result", "traceback", "revision__source", "revision__build_log", "revision__lock"
    )
    if client:
        qs = qs.filter(client__name=client)
    if surface in Surface.values:
        qs = qs.filter(surface=surface)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if toolkit:
        qs = qs.filter(toolkit__slug=toolkit)
    if user:
        qs = qs.filter(user__username=user)
    if status in RunStatus.values:
        qs = qs.filter(status=status)
    if tool:
        qs = qs.filter(tool=tool)
    return qs


def events_after(invocation: Invocation, *, after: int = 0, limit: int = EVENTS_PAGE_MAX) -> tuple[list[Event], int | None]:
    """A run's events after `after` (a seq), in order, at most `limit` of them, and the cursor
    of the next page (the seq to pass as `after`; None at the end). One query, however long
    the run's list is."""
    rows = list(Event.objects.filter(invocation=invocation, seq__gt=after).order_by("seq")[: limit + 1])
    page = rows[:limit]
    return page, (page[-1].seq if len(rows) > limit else None)


def events_before(invocation: Invocation, *, before: int | None = None, limit: int) -> tuple[list[Event], bool]:
    """A run's last `limit` events (of those before `before`, a seq, when given), in order,
    and whether earlier ones exist. One query."""
    qs = Event.objects.filter(invocation=invocation)
    if before is not None:
        qs = qs.filter(seq__lt=before)
    rows = list(qs.order_by("-seq")[: limit + 1])
    return rows[:limit][::-1], len(rows) > limit


def invocations_page(
    qs: QuerySet[Invocation], *, after: tuple[datetime, uuid.UUID] | None = None, backward: bool = False, limit: int
) -> tuple[list[Invocation], bool]:
    """One page of `qs`, newest first (created_at, then id, a total order): the `limit` rows
    older than `after` (a row's (created_at, id)), or with `backward` the `limit` rows newer
    than it, and whether there are more that way. One query; the indexes on (created_at, id)
    and (user, created_at, id) serve it at any depth."""
    if after is not None:
        created, pk = after
        if backward:
            qs = qs.filter(Q(created_at__gt=created) | Q(created_at=created, id__gt=pk), created_at__gte=created)
        else:
            # The plain bound first, so PostgreSQL starts its index scan at the cursor.
            qs = qs.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=pk), created_at__lte=created)
    rows = list(qs.order_by(*(("created_at", "id") if backward else ("-created_at", "-id")))[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    if backward:
        rows.reverse()
    return rows, more


CURSOR_KIND = "invocations"


def invocation_cursor(row: Invocation, *, backward: bool = False) -> str:
    """A signed cursor (toolhub.keyset) to continue from `row`: to older rows, or newer ones."""
    return keyset.encode(CURSOR_KIND, [row.created_at.isoformat(), str(row.id), backward])


def parse_invocation_cursor(cursor: str) -> tuple[tuple[datetime, uuid.UUID], bool]:
    """The (created_at, id) key and direction of a cursor from invocation_cursor; BadCursor."""
    created, pk, backward = keyset.decode(CURSOR_KIND, cursor, length=3)
    try:
        return (datetime.fromisoformat(created), uuid.UUID(pk)), bool(backward)
    except (TypeError, ValueError):
        raise keyset.BadCursor("The cursor is not one this list gave out.") from None
