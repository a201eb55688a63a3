"""Who may do what. Admins are staff users; toolkit authors hold the `toolkits.add_toolkit`
permission (the "Toolkit authors" group grants it); every signed-in user may view and invoke."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404, HttpRequest, HttpResponse


def is_admin(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_active and getattr(user, "is_staff", False))


def can_upload(user) -> bool:
    return is_admin(user) or bool(user.is_authenticated and user.has_perm("toolkits.add_toolkit"))


def can_manage_toolkit(user, toolkit) -> bool:
    """Owners and admins may upload revisions, roll back, delete and translate."""
    return is_admin(user) or (user.is_authenticated and toolkit.owner_id == user.pk)


def require_admin(user: AbstractBaseUser | AnonymousUser) -> None:
    """The one rule for admin-only things: to anyone else they do not exist (404, as for
    every object a user may not see; docs/api.md)."""
    if not is_admin(user):
        raise Http404


def admin_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """404 for non-admins before anything else is checked, so that not even the allowed
    methods of an admin page are revealed to them."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        require_admin(request.user)
        return view(request, *args, **kwargs)

    return wrapper
