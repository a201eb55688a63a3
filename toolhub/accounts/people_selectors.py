"""Reads for the Users and Groups pages and `/api/v1/users`, `/api/v1/groups`: people (never
the service users of client credentials), each with their role, source and groups in a fixed
number of queries, however many there are."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db.models import Case, CharField, Count, Exists, OuterRef, Prefetch, Q, QuerySet, Value, When
from django.db.models.functions import Coalesce

from toolhub.accounts.models import AUTHORS_GROUP, Profile, Source

PAGE = 50
RECENT_RUNS = 20
MAX_QUERY = 200
# A name of at most 150 characters, each up to 4 bytes in UTF-8, as hex.
CURSOR_MAX = 150 * 4 * 2
CURSOR_PATTERN = r"^(?:[0-9a-f]{2})*$"


def _is_author():
    users = get_user_model()
    in_group = Exists(users.groups.through.objects.filter(user_id=OuterRef("pk"), group__name=AUTHORS_GROUP))
    holds = Exists(
        users.user_permissions.through.objects.filter(
            user_id=OuterRef("pk"), permission__in=Permission.objects.filter(codename="add_toolkit", content_type__app_label="toolkits")
        )
    )
    return in_group | holds


def people(
    *, q: str = "", role: str = "", group: str = "", active: bool | None = None, source: str = "",
) -> QuerySet:
    """People, by username, annotated with `role` and `source`, their groups (the authors'
    group left out: the role says it) prefetched as `listed_groups`."""
    users = get_user_model()
    qs = (
        users.objects.filter(client_credential__isnull=True)
        .annotate(
            role=Case(
                When(is_staff=True, then=Value("admin")),
                When(_is_author(), then=Value("author")),
                default=Value("user"),
                output_field=CharField(),
            ),
            source=Coalesce(
                Profile.objects.filter(user_id=OuterRef("pk")).values("source")[:1], Value(Source.LOCAL),
                output_field=CharField(),
            ),
        )
        .prefetch_related(
            Prefetch("groups", queryset=Group.objects.exclude(name=AUTHORS_GROUP).order_by("name"), to_attr="listed_groups")
        )
        .order_by("username")
    )
    q = (q or "").strip()[:MAX_QUERY]
    if q:
        qs = qs.filter(Q(username__icontains=q) | Q(email__icontains=q))
    if role:
        qs = qs.filter(role=role)
    if group:
        qs = qs.filter(groups__name=group)
    if active is not None:
        qs = qs.filter(is_active=active)
    if source:
        qs = qs.filter(source=source)
    return qs


def person_get(username: str):
    """The person with this username (role, source and groups as in `people`), or None."""
    if not username or len(username) > 150:
        return None
    return people().filter(username=username).first()


def encode_cursor(name: str) -> str:
    """A page's cursor: the last name on it, hex-encoded (opaque to callers, and any cursor of
    the documented pattern means a position, so none is refused)."""
    return name.encode().hex()


def decode_cursor(cursor: str) -> str | None:
    """The name a cursor continues after; None for one that is not hex."""
    if len(cursor) > CURSOR_MAX:
        return None
    try:
        raw = bytes.fromhex(cursor)
    except ValueError:
        return None
    # NUL cannot go to PostgreSQL; no username or group name holds one.
    return raw.decode("utf-8", "replace").replace("\x00", "")


def people_page(qs: QuerySet, *, after: str | None, limit: int = PAGE) -> tuple[list, str | None]:
    """One page of `qs` (ordered by username) after the username `after`, and the cursor of the
    next page (None on the last)."""
    if after:
        qs = qs.filter(username__gt=after)
    rows = list(qs[: limit + 1])
    following = encode_cursor(rows[limit - 1].username) if len(rows) > limit else None
    return rows[:limit], following


def recent_runs(user) -> list:
    # Through the reverse relation: accounts does not import the runs app (which imports it).
    return list(user.invocations.select_related("toolkit", "user").order_by("-created_at")[:RECENT_RUNS])


def groups(*, q: str = "") -> QuerySet[Group]:
    """Groups by name with their number of members and of toolkits whose access names them."""
    qs = Group.objects.annotate(
        member_count=Count("user", filter=Q(user__client_credential__isnull=True), distinct=True),
        toolkit_count=Count("usable_toolkits", distinct=True),
    ).order_by("name")
    q = (q or "").strip()[:MAX_QUERY]
    return qs.filter(name__icontains=q) if q else qs


def group_members(group: Group) -> list:
    return list(group.user_set.filter(client_credential__isnull=True).order_by("username").only("username", "email", "is_active"))


def group_toolkits(group: Group) -> list:
    return list(group.usable_toolkits.order_by("slug").only("slug", "title", "use"))
