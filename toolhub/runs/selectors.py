"""Reads of invocations, shared by the pages and the API."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet
from django.http import Http404

from toolhub.accounts.roles import is_admin
from toolhub.runs.models import Event, Invocation, RunStatus

# The most events one API page (and the inline list of an invocation) holds.
EVENTS_PAGE_MAX = 1000


def parse_invocation_id(value) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def get_invocation_for_user(*, user, invocation_id) -> Invocation:
    """The one way pages and endpoints fetch an invocation: its invoker and admins see it,
    nobody else learns it exists."""
    pk = parse_invocation_id(invocation_id)
    invocation = Invocation.objects.select_related("toolkit", "revision", "user", "client").filter(pk=pk).first() if pk else None
    if invocation is None or not (is_admin(user) or invocation.user_id == user.pk):
        raise Http404
    return invocation


def invocations_recent(*, user, toolkit, limit: int = 10) -> QuerySet[Invocation]:
    """A toolkit's latest runs on its Tools tab: everyone's for admins, else the user's own.
    Each row shows its toolkit and user, so both are joined."""
    qs = Invocation.objects.filter(toolkit=toolkit).select_related("user", "toolkit").defer("result", "traceback")
    if not is_admin(user):
        qs = qs.filter(user=user)
    return qs[:limit]


def invocations_history(*, toolkit: str = "", user: str = "", status: str = "", tool: str = "") -> QuerySet[Invocation]:
    """Every invocation for the admins' history page, newest first, filtered by toolkit slug,
    username, status and tool name (an empty filter, or an unknown status, filters nothing).
    Rows never load results, tracebacks or the revision's source, lock and build log."""
    qs = Invocation.objects.select_related("toolkit", "user", "revision").defer(
        "result", "traceback", "revision__source", "revision__build_log", "revision__lock"
    )
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
