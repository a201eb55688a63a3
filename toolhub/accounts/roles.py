"""Who may do what. Admins are staff users; toolkit authors hold the `toolkits.add_toolkit`
permission (the "Toolkit authors" group grants it); every signed-in user may view and invoke."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


def is_admin(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_active and getattr(user, "is_staff", False))


def can_upload(user) -> bool:
    return is_admin(user) or bool(user.is_authenticated and user.has_perm("toolkits.add_toolkit"))


def can_manage_toolkit(user, toolkit) -> bool:
    """Owners and admins may upload revisions, roll back, delete and translate."""
    return is_admin(user) or (user.is_authenticated and toolkit.owner_id == user.pk)
