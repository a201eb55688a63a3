"""Request types for views behind `login_required`."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest


class AuthenticatedHttpRequest(HttpRequest):
    """A request whose user has logged in (for type checking views behind login_required)."""

    user: User
