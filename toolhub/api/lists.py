"""Lists that scale (docs/api.md, "Lists that scale"): `GET /api/v1/toolkits` and
`GET /api/v1/invocations` answer `{"items": [...], "next_cursor": "..." or null}`, a page at a
time in keyset order (toolhub.keyset): pass `next_cursor` back as `cursor` for the next page.
A page is one query for its rows whatever its depth; `limit` is bounded.

Errors are raised as django-ninja's ValidationError, which toolhub.api.api answers with the
error shape and the parameter's name as `field` (this module is imported by that one, so it
cannot use its helpers)."""

from __future__ import annotations

from datetime import UTC
from typing import Any, Literal

from django.contrib.auth.models import User
from django.utils import timezone
from ninja import Query, Router, Schema
from ninja.errors import HttpError, ValidationError

from toolhub import keyset
from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import is_admin
from toolhub.api import schemas as s
from toolhub.runs import selectors as run_selectors
from toolhub.runs.models import Invocation
from toolhub.toolkits import selectors

router = Router()

TOOLKITS_LIMIT, TOOLKITS_LIMIT_MAX = 100, 500
INVOCATIONS_LIMIT, INVOCATIONS_LIMIT_MAX = 50, 200
# An invocation's error is shown in a list up to this many characters (the whole one is in
# GET /invocations/{id}).
ERROR_CHARS = 1000
TOOLKIT_CURSOR = "toolkits"
SurfaceName = Literal["api", "mcp", "openapi", "page", "agent"]
LIST_ERRORS = {400: s.ErrorOut, 401: s.ErrorOut, 403: s.ErrorOut, 503: s.ErrorOut}


class ToolkitPage(Schema):
    items: list[s.ToolkitSummary]
    next_cursor: str | None


class InvocationSummary(s.ReadsInvocation):
    id: str
    toolkit: str
    revision: int
    tool: str
    status: s.RunStatus
    error: str | None
    user: str
    client: str | None
    surface: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    duration_ms: int | None
    limit: str | None

    @staticmethod
    def resolve_error(invocation: Invocation) -> str | None:
        return invocation.error[:ERROR_CHARS] or None

    @staticmethod
    def resolve_user(invocation: Invocation) -> str:
        return invocation.user.get_username()


class InvocationPage(Schema):
    items: list[InvocationSummary]
    next_cursor: str | None


def _refused(field: str, message: str) -> ValidationError:
    return ValidationError([{"loc": ["query", field], "msg": message}])


def toolkits_page(*, user: User, query: str, cursor: str, limit: int) -> dict[str, Any]:
    """The toolkits `user` may use, by title then slug (unique), `limit` after the cursor's."""
    qs = selectors.toolkit_list(user=user, query=query)
    if cursor:
        try:
            title, slug = keyset.decode(TOOLKIT_CURSOR, cursor, length=2)
        except keyset.BadCursor as exc:
            raise _refused("cursor", str(exc)) from None
        qs = qs.filter(title__gte=title).exclude(title=title, slug__lte=slug)
    rows = list(qs[: limit + 1])
    page = rows[:limit]
    next_cursor = keyset.encode(TOOLKIT_CURSOR, [page[-1].title, page[-1].slug]) if len(rows) > limit else None
    return {"items": page, "next_cursor": next_cursor}


@router.get("/invocations", response={200: InvocationPage, **LIST_ERRORS}, tags=["invocations"])
def list_invocations(
    request: AuthenticatedHttpRequest,
    toolkit: str = Query("", max_length=200),
    tool: str = Query("", max_length=200),
    status: s.RunStatus | None = None,
    user: str = Query("", max_length=150),
    client: str = Query("", max_length=100),
    surface: SurfaceName | None = None,
    since: s.IsoDateTime | None = None,
    cursor: str = Query("", max_length=keyset.MAX_CURSOR_CHARS),
    limit: int = Query(INVOCATIONS_LIMIT, ge=1, le=INVOCATIONS_LIMIT_MAX),
) -> dict[str, Any]:
    """Invocations newest first: an admin's of everyone (`user` filters by username), anyone
    else's of their own only (`user` may only name themselves). `since` is an ISO 8601 time
    (with an offset, else UTC)."""
    if user and not is_admin(request.user) and user != request.user.get_username():
        raise HttpError(403, "Only admins may list other people's invocations.")
    if since is not None and timezone.is_naive(since):
        since = timezone.make_aware(since, UTC)
    qs = run_selectors.invocations_history(
        toolkit=toolkit, tool=tool, status=status or "", user=user, client=client, surface=surface or "", since=since,
    )
    if not is_admin(request.user):
        qs = qs.filter(user=request.user)
    after, backward = None, False
    if cursor:
        try:
            after, backward = run_selectors.parse_invocation_cursor(cursor)
        except keyset.BadCursor as exc:
            raise _refused("cursor", str(exc)) from None
    rows, more = run_selectors.invocations_page(qs, after=after, backward=backward, limit=limit)
    # The API pages one way; a backward cursor (from a page's "Previous" link) is followed.
    next_cursor = run_selectors.invocation_cursor(rows[-1]) if rows and (more or backward) else None
    return {"items": rows, "next_cursor": next_cursor}
