"""`/api/v1/users` and `/api/v1/groups`: the people of the organisation and their groups, for
admins only (anyone else gets 404, as for the other admin endpoints). docs/people.md documents
them; the rules are toolhub.accounts.people's."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Prefetch, QuerySet
from django.http import Http404
from django.urls import reverse
from ninja import Field, Query, Router, Schema, Status

from toolhub.accounts import people as services
from toolhub.accounts import people_selectors as selectors
from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import is_admin
from toolhub.api.schemas import NOT_BLANK, ErrorOut, StrictBody
from toolhub.toolkits.models import Toolkit

router = Router(tags=["people"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 405: ErrorOut, 409: ErrorOut}
PAGE_MAX = 200


class UserOut(Schema):
    username: str
    email: str
    role: str
    groups: list[str]
    active: bool
    last_login: str | None
    source: str


class UserCreatedOut(UserOut):
    # The invitation link, shown once; null when a password was set.
    invitation_url: str | None


class UserList(Schema):
    items: list[UserOut]
    next_cursor: str | None


class UserIn(StrictBody):
    username: str = Field(min_length=1, max_length=150)
    email: str = Field(min_length=3, max_length=services.MAX_EMAIL)
    role: str = Field(default="user", pattern=r"^(user|author|admin)$")
    groups: list[str] = Field(default_factory=list, max_length=services.MAX_GROUPS)
    password: str | None = Field(default=None, min_length=1, max_length=4096)
    invite: bool = False


class UserPatch(StrictBody):
    email: str | None = Field(default=None, min_length=3, max_length=services.MAX_EMAIL)
    role: str | None = Field(default=None, pattern=r"^(user|author|admin)$")
    groups: list[str] | None = Field(default=None, max_length=services.MAX_GROUPS)
    active: bool | None = None


class GroupOut(Schema):
    name: str
    member_count: int
    toolkits: list[str]


class GroupDetail(GroupOut):
    members: list[str]


class GroupList(Schema):
    items: list[GroupOut]
    next_cursor: str | None


class GroupIn(StrictBody):
    name: str = Field(min_length=1, max_length=services.MAX_GROUP_NAME, pattern=NOT_BLANK)
    members: list[str] = Field(default_factory=list, max_length=services.MAX_MEMBERS_CHANGED)


class GroupPatch(StrictBody):
    name: str | None = Field(default=None, min_length=1, max_length=services.MAX_GROUP_NAME, pattern=NOT_BLANK)
    add: list[str] = Field(default_factory=list, max_length=services.MAX_MEMBERS_CHANGED)
    remove: list[str] = Field(default_factory=list, max_length=services.MAX_MEMBERS_CHANGED)


def _admin(request: AuthenticatedHttpRequest) -> None:
    if not is_admin(request.user):
        raise Http404


def _refused(exc: services.PeopleError) -> Status[dict[str, Any]]:
    if exc.status == 404:
        raise Http404
    return Status(exc.status, {"errors": [{"message": str(exc), "field": exc.field, "line": None}]})


def user_out(user: User) -> dict[str, Any]:
    """A person as `selectors.people` reads them (role, source and groups annotated)."""
    return {
        "username": user.username, "email": user.email, "role": user.role,  # type: ignore[attr-defined]
        "groups": [g.name for g in user.listed_groups], "active": user.is_active,  # type: ignore[attr-defined]
        "last_login": user.last_login.isoformat() if user.last_login else None, "source": user.source,  # type: ignore[attr-defined]
    }


def _person(username: str) -> User:
    user = selectors.person_get(username)
    if user is None:
        raise Http404
    return user


# USERS
# ------------------------------------------------------------------------------


@router.get("/users", response={200: UserList, **ERRORS})
def list_users(
    request: AuthenticatedHttpRequest,
    q: str = Query("", max_length=selectors.MAX_QUERY),
    role: str = Query("", pattern=r"^(|user|author|admin)$"),
    group: str = Query("", max_length=services.MAX_GROUP_NAME),
    active: bool | None = None,
    source: str = Query("", pattern=r"^(|local|oidc)$"),
    cursor: str = Query("", max_length=selectors.CURSOR_MAX, pattern=selectors.CURSOR_PATTERN),
    limit: int = Query(selectors.PAGE, ge=1, le=PAGE_MAX),
) -> dict[str, Any]:
    _admin(request)
    after = selectors.decode_cursor(cursor) if cursor else None
    qs = selectors.people(q=q, role=role, group=group, active=active, source=source)
    rows, following = selectors.people_page(qs, after=after, limit=limit)
    return {"items": [user_out(u) for u in rows], "next_cursor": following}


@router.post("/users", response={201: UserCreatedOut, **ERRORS})
def create_user(request: AuthenticatedHttpRequest, payload: UserIn) -> Status[dict[str, Any]]:
    _admin(request)
    try:
        user, raw = services.person_create(
            username=payload.username, email=payload.email, role=payload.role, groups=payload.groups,
            password=payload.password, invite=payload.invite, by=request.user,
        )
    except services.PeopleError as exc:
        return _refused(exc)
    url = request.build_absolute_uri(reverse("invitation_accept", args=[raw])) if raw else None
    return Status(201, {**user_out(_person(user.username)), "invitation_url": url})


@router.get("/users/{username}", response={200: UserOut, **ERRORS})
def get_user(request: AuthenticatedHttpRequest, username: str) -> dict[str, Any]:
    _admin(request)
    return user_out(_person(username))


@router.patch("/users/{username}", response={200: UserOut, **ERRORS})
def update_user(
    request: AuthenticatedHttpRequest, username: str, payload: UserPatch
) -> dict[str, Any] | Status[dict[str, Any]]:
    _admin(request)
    user = _person(username)
    try:
        services.person_update(
            user=user, by=request.user, email=payload.email, role=payload.role, groups=payload.groups,
            active=payload.active,
        )
    except services.PeopleError as exc:
        return _refused(exc)
    return user_out(_person(username))


@router.delete("/users/{username}", response={204: None, **ERRORS})
def delete_user(request: AuthenticatedHttpRequest, username: str) -> Status[dict[str, Any]] | Status[None]:
    _admin(request)
    try:
        services.person_delete(user=_person(username), by=request.user)
    except services.PeopleError as exc:
        return _refused(exc)
    return Status(204, None)


# GROUPS
# ------------------------------------------------------------------------------


def _groups_with_toolkits() -> QuerySet[Group]:
    return selectors.groups().prefetch_related(
        Prefetch("usable_toolkits", queryset=Toolkit.objects.order_by("slug").only("slug"), to_attr="named_by")
    )


def group_out(group: Group) -> dict[str, Any]:
    # A group of `_groups_with_toolkits`, with its counts annotated and toolkits prefetched.
    return {
        "name": group.name, "member_count": group.member_count,  # type: ignore[attr-defined]
        "toolkits": [t.slug for t in group.named_by],  # type: ignore[attr-defined]
    }


def _group(name: str) -> Group:
    group = _groups_with_toolkits().filter(name=name).first() if len(name) <= services.MAX_GROUP_NAME else None
    if group is None:
        raise Http404
    return group


def _group_detail(name: str) -> dict[str, Any]:
    group = _group(name)
    return {**group_out(group), "members": [u.username for u in selectors.group_members(group)]}


@router.get("/groups", response={200: GroupList, **ERRORS})
def list_groups(
    request: AuthenticatedHttpRequest,
    q: str = Query("", max_length=selectors.MAX_QUERY),
    cursor: str = Query("", max_length=selectors.CURSOR_MAX, pattern=selectors.CURSOR_PATTERN),
    limit: int = Query(selectors.PAGE, ge=1, le=PAGE_MAX),
) -> dict[str, Any]:
    _admin(request)
    after = selectors.decode_cursor(cursor) if cursor else None
    qs = _groups_with_toolkits()
    if q:
        qs = qs.filter(name__icontains=q.strip())
    if after:
        qs = qs.filter(name__gt=after)
    rows = list(qs[: limit + 1])
    following = selectors.encode_cursor(rows[limit - 1].name) if len(rows) > limit else None
    return {"items": [group_out(g) for g in rows[:limit]], "next_cursor": following}


@router.post("/groups", response={201: GroupDetail, **ERRORS})
def create_group(request: AuthenticatedHttpRequest, payload: GroupIn) -> Status[dict[str, Any]]:
    _admin(request)
    try:
        # Nothing is made when a member is unknown.
        with transaction.atomic():
            group = services.group_create(name=payload.name)
            services.group_members_change(group=group, add=payload.members)
    except services.PeopleError as exc:
        return _refused(exc)
    return Status(201, _group_detail(group.name))


@router.get("/groups/{name}", response={200: GroupDetail, **ERRORS})
def get_group(request: AuthenticatedHttpRequest, name: str) -> dict[str, Any]:
    _admin(request)
    return _group_detail(name)


@router.patch("/groups/{name}", response={200: GroupDetail, **ERRORS})
def update_group(
    request: AuthenticatedHttpRequest, name: str, payload: GroupPatch
) -> dict[str, Any] | Status[dict[str, Any]]:
    _admin(request)
    group = _group(name)
    try:
        with transaction.atomic():
            services.group_members_change(group=group, add=payload.add, remove=payload.remove)
            if payload.name is not None:
                services.group_rename(group=group, name=payload.name)
    except services.PeopleError as exc:
        return _refused(exc)
    return _group_detail(group.name)


@router.delete("/groups/{name}", response={204: None, **ERRORS})
def delete_group(request: AuthenticatedHttpRequest, name: str) -> Status[dict[str, Any]] | Status[None]:
    _admin(request)
    try:
        services.group_delete(group=_group(name))
    except services.PeopleError as exc:
        return _refused(exc)
    return Status(204, None)

