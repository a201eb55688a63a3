"""Reads of invocations, shared by the pages and the API."""

from __future__ import annotations

import uuid

from django.http import Http404

from toolhub.accounts.roles import is_admin
from toolhub.runs.models import Invocation


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
