"""The people of an organisation and their groups: what admins change on the Users and Groups
pages and through `/api/v1/users` and `/api/v1/groups` (docs/people.md).

The roles are the ones toolhub.accounts.roles checks: an admin is a staff user, an author is in
the "Toolkit authors" group (or holds `toolkits.add_toolkit` directly), anyone else is a user.
The email is the identity the LLM apps forward, so no two people share one (case-insensitive).
Whatever would leave no active admin is refused."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from toolhub.accounts.models import AUTHORS_GROUP, Invitation, Profile, Source, hash_token

Role = Literal["user", "author", "admin"]
ROLES: tuple[str, ...] = ("user", "author", "admin")
MAX_EMAIL = 254
MAX_GROUP_NAME = 150
# The groups one person may be put in, and the members one change may add or remove.
MAX_GROUPS = 200
MAX_MEMBERS_CHANGED = 500
INVITATION_PREFIX = "thi_"


class PeopleError(ValueError):
    """A change refused: 400 (bad input), 404 (no such name) or 409 (conflicts with the state)."""

    def __init__(self, message: str, field: str | None = None, status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status


def is_service_user(user) -> bool:
    """The own identity of an LLM app's client credential: not a person, never managed here."""
    return hasattr(user, "client_credential")


def user_role(user) -> Role:
    if user.is_staff:
        return "admin"
    if user.groups.filter(name=AUTHORS_GROUP).exists() or user.user_permissions.filter(codename="add_toolkit").exists():
        return "author"
    return "user"


def user_source(user) -> str:
    profile = Profile.objects.filter(user=user).only("source").first()
    return profile.source if profile else Source.LOCAL


# CHECKS
# ------------------------------------------------------------------------------


def _clean_email(email: str, *, exclude_pk: int | None = None) -> str:
    email = (email or "").strip()
    if not email or len(email) > MAX_EMAIL:
        raise PeopleError(f"An email address of at most {MAX_EMAIL} characters is required.", "email")
    try:
        validate_email(email)
    except ValidationError:
        raise PeopleError("This is not an email address.", "email") from None
    _lock_email(email)
    taken = get_user_model().objects.filter(email__iexact=email)
    if exclude_pk is not None:
        taken = taken.exclude(pk=exclude_pk)
    if taken.exists():
        raise PeopleError("Another person has this email.", "email", status=409)
    return email


def _lock_email(email: str) -> None:
    # Two admins creating the same email at once would both pass the check above; on
    # PostgreSQL the second waits here (to the end of its transaction) and then sees the first.
    if connection.vendor == "postgresql":
        key = int.from_bytes(hashlib.sha256(email.lower().encode()).digest()[:8], "big", signed=True)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


def _clean_username(username: str) -> str:
    username = (username or "").strip()
    users = get_user_model()
    if not username or len(username) > 150:
        raise PeopleError("A username of 1 to 150 characters is required.", "username")
    try:
        users.username_validator(username)
    except ValidationError:
        raise PeopleError("A username may hold only letters, digits and @ . + - _.", "username") from None
    if users.objects.filter(username__iexact=username).exists():
        raise PeopleError("This username is taken.", "username", status=409)
    return username


def _clean_role(role: str) -> Role:
    if role not in ROLES:
        raise PeopleError("role must be user, author or admin.", "role")
    return role  # type: ignore[return-value]


def _groups(names: list[str]) -> list[Group]:
    """The groups with these names (the authors' group excluded: the role says it)."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise PeopleError("groups must be a list of names.", "groups")
    wanted = sorted({n.strip() for n in names if n.strip()} - {AUTHORS_GROUP})
    if len(wanted) > MAX_GROUPS:
        raise PeopleError(f"At most {MAX_GROUPS} groups may be given.", "groups")
    found = list(Group.objects.filter(name__in=wanted))
    missing = sorted(set(wanted) - {g.name for g in found})
    if missing:
        raise PeopleError(f"No such group: {', '.join(missing)}.", "groups")
    return found


def _check_password(password: str, user=None) -> None:
    if len(password) > 4096:
        raise PeopleError("The password is too long.", "password")
    try:
        password_validation.validate_password(password, user)
    except ValidationError as exc:
        raise PeopleError(" ".join(exc.messages), "password") from None


def _guard_last_admin(user) -> None:
    """Refuse when `user` is the only active admin (called before they stop being one). The
    active admins' rows are locked, so two admins demoting each other at once cannot both pass."""
    admins = list(
        get_user_model().objects.select_for_update().filter(is_staff=True, is_active=True).values_list("pk", flat=True)
    )
    if user.pk in admins and len(admins) <= 1:
        raise PeopleError("This is the last active admin; make someone else an admin first.", None, status=409)


def _authors_group() -> Group:
    """The "Toolkit authors" group, with the permission that makes its members authors. A data
    migration makes both; if the group was deleted since, it is made again here, permission and
    all, so that the role an admin sets is the role the person gets."""
    group, _created = Group.objects.get_or_create(name=AUTHORS_GROUP)
    permission = Permission.objects.filter(codename="add_toolkit", content_type__app_label="toolkits").first()
    if permission is not None:
        group.permissions.add(permission)
    return group


def _set_role(user, role: Role) -> None:
    authors = _authors_group()
    user.is_staff = role == "admin"
    if role != "admin":
        # A superuser passes every permission check; demoted, they must not.
        user.is_superuser = False
    user.save(update_fields=["is_staff", "is_superuser"])
    if role == "author":
        user.groups.add(authors)
    else:
        user.groups.remove(authors)
        # An author made by hand in Django's admin holds the permission itself.
        user.user_permissions.remove(*Permission.objects.filter(codename="add_toolkit", content_type__app_label="toolkits"))


def _set_groups(user, groups: list[Group]) -> None:
    keep = [g for g in user.groups.all() if g.name == AUTHORS_GROUP]
    user.groups.set([*groups, *keep])


# PEOPLE
# ------------------------------------------------------------------------------


def _invitation_issue(*, user, by) -> str:
    raw = INVITATION_PREFIX + secrets.token_urlsafe(32)
    Invitation.objects.create(
        user=user, digest=hash_token(raw), created_by=by,
        expires_at=timezone.now() + timedelta(days=settings.TOOLHUB_INVITATION_DAYS),
    )
    return raw


def person_create(
    *, username: str, email: str, role: str = "user", groups: list[str] | None = None,
    password: str | None = None, invite: bool = False, by,
) -> tuple[Any, str | None]:
    """A new local person, with either a password or an invitation; returns them and the raw
    invitation token (shown once, never stored), None with a password."""
    role = _clean_role(role)
    if bool(password) == bool(invite):
        raise PeopleError("Give either a password or ask for an invitation.", "password")
    users = get_user_model()
    try:
        with transaction.atomic():
            username = _clean_username(username)
            email = _clean_email(email)
            found = _groups(groups or [])
            user = users(username=username, email=email)
            if password:
                _check_password(password, user)
                user.set_password(password)
            else:
                user.set_unusable_password()
            user.save()
            Profile.objects.update_or_create(user=user, defaults={"source": Source.LOCAL})
            _set_role(user, role)
            _set_groups(user, found)
            raw = _invitation_issue(user=user, by=by) if invite else None
    except IntegrityError:
        raise PeopleError("This username is taken.", "username", status=409) from None
    return user, raw


def person_update(
    *, user, by, email: str | None = None, role: str | None = None, groups: list[str] | None = None,
    active: bool | None = None,
) -> Any:
    """Change what is given; nothing changes when any part is refused."""
    if is_service_user(user):
        raise PeopleError("Not found.", None, status=404)
    with transaction.atomic():
        fields: list[str] = []
        if email is not None and email.strip().lower() != (user.email or "").lower():
            user.email = _clean_email(email, exclude_pk=user.pk)
            fields.append("email")
        elif email is not None and email.strip() != user.email:
            user.email = email.strip()  # Only the case changed: still the same person.
            fields.append("email")
        found = _groups(groups) if groups is not None else None
        if role is not None:
            role = _clean_role(role)
            if user.is_staff and role != "admin":
                _guard_last_admin(user)
        if active is not None and not active and user.is_active and user.is_staff:
            _guard_last_admin(user)
        if active is not None and active != user.is_active:
            # Deactivated, their session and API tokens stop at once (the auth backend and
            # clients.resolve_caller refuse inactive users); runs already started finish.
            user.is_active = active
            fields.append("is_active")
        if fields:
            user.save(update_fields=fields)
        if role is not None:
            _set_role(user, role)
        if found is not None:
            _set_groups(user, found)
    return user


def person_delete(*, user, by) -> None:
    """Remove a person who has left nothing behind. Someone with toolkits or runs is kept for
    the history: deactivate them instead."""
    if is_service_user(user):
        raise PeopleError("Not found.", None, status=404)
    if user.pk == getattr(by, "pk", None):
        raise PeopleError("You cannot delete yourself.", None, status=409)
    if user.invocations.exists() or user.agent_runs.exists():
        raise PeopleError("This person has runs in the history; deactivate them instead.", None, status=409)
    try:
        with transaction.atomic():
            if user.is_staff and user.is_active:
                _guard_last_admin(user)
            user.delete()
    except ProtectedError:
        raise PeopleError("This person owns toolkits or revisions; deactivate them instead.", None, status=409) from None


def invitation_for(raw: str) -> Invitation | None:
    """The open invitation of this raw token, or None (unknown, used, expired, or for a person
    deactivated since)."""
    if not raw or len(raw) > 200 or not raw.startswith(INVITATION_PREFIX):
        return None
    invitation = Invitation.objects.select_related("user").filter(digest=hash_token(raw)).first()
    if invitation is None or invitation.used_at is not None or invitation.expires_at <= timezone.now():
        return None
    return invitation if invitation.user.is_active else None


def invitation_accept(*, raw: str, password: str) -> Any:
    """Set the invited person's password; the invitation cannot be used again."""
    with transaction.atomic():
        invitation = invitation_for(raw)
        if invitation is None:
            raise PeopleError("This invitation link is not valid any more; ask an admin for a new one.", None, status=404)
        # Used once: of two concurrent submissions only one updates the row.
        if not Invitation.objects.filter(pk=invitation.pk, used_at__isnull=True).update(used_at=timezone.now()):
            raise PeopleError("This invitation link is not valid any more; ask an admin for a new one.", None, status=404)
        user = invitation.user
        _check_password(password, user)
        user.set_password(password)
        user.save(update_fields=["password"])
    return user


def person_reinvite(*, user, by) -> str:
    """A new invitation link for a person; the earlier ones stop working."""
    if is_service_user(user) or not user.is_active:
        raise PeopleError("Only an active person can be invited.", None, status=409)
    with transaction.atomic():
        Invitation.objects.filter(user=user, used_at__isnull=True).update(expires_at=timezone.now())
        return _invitation_issue(user=user, by=by)


# GROUPS
# ------------------------------------------------------------------------------


def _clean_group_name(name: str, *, exclude_pk: int | None = None) -> str:
    name = (name or "").strip()
    if not name or len(name) > MAX_GROUP_NAME:
        raise PeopleError(f"A name of 1 to {MAX_GROUP_NAME} characters is required.", "name")
    if any(ord(c) < 32 for c in name):
        raise PeopleError("A group's name cannot hold control characters.", "name")
    taken = Group.objects.filter(name__iexact=name)
    if exclude_pk is not None:
        taken = taken.exclude(pk=exclude_pk)
    if taken.exists():
        raise PeopleError("A group with this name exists.", "name", status=409)
    return name


def _not_authors(group: Group) -> None:
    if group.name == AUTHORS_GROUP:
        raise PeopleError("The authors' group makes the author role; it cannot be renamed or deleted.", None, status=409)


def group_create(*, name: str) -> Group:
    try:
        with transaction.atomic():
            return Group.objects.create(name=_clean_group_name(name))
    except IntegrityError:
        raise PeopleError("A group with this name exists.", "name", status=409) from None


def group_rename(*, group: Group, name: str) -> Group:
    _not_authors(group)
    new = _clean_group_name(name, exclude_pk=group.pk)
    if new != group.name:
        group.name = new
        try:
            with transaction.atomic():
                group.save(update_fields=["name"])
        except IntegrityError:
            raise PeopleError("A group with this name exists.", "name", status=409) from None
    return group


def group_delete(*, group: Group) -> None:
    """Its members leave it and toolkits whose access names it stop naming it (with "groups"
    access, its members lose that toolkit unless something else gives it to them)."""
    _not_authors(group)
    group.delete()


def group_members_change(*, group: Group, add: list[str] | None = None, remove: list[str] | None = None) -> Group:
    add, remove = add or [], remove or []
    for field, names in (("add", add), ("remove", remove)):
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise PeopleError(f"{field} must be a list of usernames.", field)
        if len(names) > MAX_MEMBERS_CHANGED:
            raise PeopleError(f"At most {MAX_MEMBERS_CHANGED} people may be given at once.", field)
    users = get_user_model()
    people = users.objects.filter(client_credential__isnull=True)
    found = {u.username: u for u in people.filter(username__in=set(add) | set(remove))}
    missing = sorted((set(add) | set(remove)) - set(found))
    if missing:
        raise PeopleError(f"No such user: {', '.join(missing[:20])}.", "add" if set(missing) & set(add) else "remove")
    with transaction.atomic():
        group.user_set.add(*(found[n] for n in add))
        group.user_set.remove(*(found[n] for n in remove))
    return group
