"""Who may use a toolkit: the one place that decides it, for pages, the API, MCP and the
OpenAPI tool servers alike.

A toolkit's owner and admins may always use it. Otherwise its `use` setting decides:
everyone signed in, only the listed groups and people, or admins only. A toolkit someone
may not use is absent from every list they get and its URLs answer 404 for them."""

from __future__ import annotations

from functools import cache

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.db.models import Model, Q, QuerySet

from toolhub import plainsql
from toolhub.accounts.roles import is_admin
from toolhub.toolkits.models import HistoryEntry, Revision, Toolkit, Use

# Bounds on what one access setting may list.
MAX_LISTED = 200


class InvalidAccess(ValueError):
    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def usable_filter(user) -> Q | None:
    """A filter on Toolkit for what `user` may use; None means everything (admins)."""
    if is_admin(user):
        return None
    if not (user.is_authenticated and user.is_active):
        return Q(pk__in=[])
    listed = Q(use=Use.GROUPS) & (
        Q(pk__in=Toolkit.use_users.through.objects.filter(user_id=user.pk).values("toolkit_id"))
        | Q(pk__in=Toolkit.use_groups.through.objects.filter(group__user=user).values("toolkit_id"))
    )
    return Q(owner_id=user.pk) | Q(use=Use.EVERYONE) | listed


def toolkits_usable_by(user) -> QuerySet[Toolkit]:
    condition = usable_filter(user)
    qs = Toolkit.objects.all()
    return qs if condition is None else qs.filter(condition)


def toolkit_usable_by(user, slug: str) -> Toolkit | None:
    """The toolkit with this slug if `user` may use it, else None."""
    return toolkits_usable_by(user).select_related("current_revision", "owner").filter(slug=slug).first()


# What calling a tool reads of a toolkit and its current revision (runs.services.invocation_create
# and the answer). A revision's row also holds its source, lock, build log and traceback, up to
# megabytes that every call would read and decode for nothing; any other field is read on use.
_CALL_FIELDS: dict[type[Model], set[str]] = {
    Toolkit: {"id", "slug", "owner_id", "use", "current_revision_id"},
    Revision: {"id", "number", "status", "status_detail", "status_message", "tools"},
}


@cache
def _call_read(vendor: str) -> tuple[str, tuple[plainsql.Part, ...]]:
    """The toolkit_to_call statement (toolhub.plainsql: the ORM's select_related with only()
    cost about 1 ms of compiling on every call) and its parts."""
    parts = (plainsql.Part.of(Toolkit, "t", _CALL_FIELDS[Toolkit]), plainsql.Part.of(Revision, "r", _CALL_FIELDS[Revision]))
    t, r = plainsql.table(Toolkit), plainsql.table(Revision)
    sql = (
        f"SELECT {', '.join(part.select() for part in parts)} FROM {t} t "
        f"LEFT JOIN {r} r ON r.{plainsql.column(Revision, 'id')} = t.{plainsql.column(Toolkit, 'current_revision')} "
        f"WHERE t.{plainsql.column(Toolkit, 'slug')} = %s"
    )
    return sql, parts


def _toolkit_row(slug: str) -> Toolkit | None:
    """The toolkit with this slug and its current revision, with only the _CALL_FIELDS read."""
    sql, parts = _call_read(connection.vendor)
    row = plainsql.one_row(sql, [slug])
    if row is None:
        return None
    # No current revision: the LEFT JOIN's side is all NULL, and instances() gives None for it.
    toolkit, revision = plainsql.instances(row, parts)
    toolkit.current_revision = revision
    return toolkit


def toolkit_to_call(user, slug: str, *, everyone_only: bool = False) -> Toolkit | None:
    """toolkit_usable_by for a tool call, the hot path of every surface: only the columns a call
    reads, and the plain cases of usable_filter (admins, the owner, "everyone") decided on the
    row itself, so they cost one simple query; any other case asks usable_filter as well.
    `everyone_only`: only a toolkit everyone may use (an app that named no person,
    toolhub.serving.catalog.shared_only)."""
    if not (user.is_authenticated and user.is_active):
        return None
    toolkit = _toolkit_row(slug)
    if toolkit is None:
        return None
    if everyone_only:
        return toolkit if toolkit.use == Use.EVERYONE else None
    if is_admin(user) or toolkit.owner_id == user.pk or toolkit.use == Use.EVERYONE:
        return toolkit
    return toolkit if toolkits_usable_by(user).filter(pk=toolkit.pk).exists() else None


def access_out(toolkit: Toolkit) -> dict:
    return {
        "use": toolkit.use,
        "groups": sorted(g.name for g in toolkit.use_groups.all()),
        "users": sorted(u.username for u in toolkit.use_users.all()),
    }


def _names(values, field: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise InvalidAccess(f"{field} must be a list of names.", field)
    names = sorted({v.strip() for v in values if v.strip()})
    if len(names) > MAX_LISTED:
        raise InvalidAccess(f"At most {MAX_LISTED} {field} may be listed.", field)
    return names


def toolkit_set_access(*, toolkit: Toolkit, use: str, groups: list[str], users: list[str], by) -> Toolkit:
    """Set who may use the toolkit and record the change in its history. Unknown group or
    user names are refused and nothing changes."""
    if use not in Use.values:
        raise InvalidAccess("use must be everyone, groups or admins.", "use")
    group_names = _names(groups, "groups")
    user_names = _names(users, "users")
    found_groups = list(Group.objects.filter(name__in=group_names))
    missing = sorted(set(group_names) - {g.name for g in found_groups})
    if missing:
        raise InvalidAccess(f"No such group: {', '.join(missing)}.", "groups")
    found_users = list(get_user_model().objects.filter(username__in=user_names, is_active=True))
    missing = sorted(set(user_names) - {u.username for u in found_users})
    if missing:
        raise InvalidAccess(f"No such user: {', '.join(missing)}.", "users")
    with transaction.atomic():
        locked = Toolkit.objects.select_for_update().get(pk=toolkit.pk)
        before = access_out(locked)
        locked.use = use
        locked.save(update_fields=["use"])
        # The lists only matter for "groups"; they are kept otherwise, so switching back
        # restores them.
        locked.use_groups.set(found_groups)
        locked.use_users.set(found_users)
        after = access_out(locked)
        if after != before:
            HistoryEntry.objects.create(toolkit=locked, kind="access", data={"before": before, "after": after}, by=by)
    toolkit.use = use
    return toolkit
