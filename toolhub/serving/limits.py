"""Calls per minute through MCP and the OpenAPI tool servers, per client credential and per
user. The window slides: the calls counted are the invocations made through these surfaces in
the last 60 seconds, so every ToolHub process sees the same count without a shared cache.
Concurrent calls may pass a limit by the few that were counted at the same moment."""

from __future__ import annotations

import math
from datetime import timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from toolhub.accounts.clients import Caller
from toolhub.runs.models import Invocation, Surface

WINDOW = timedelta(seconds=60)
SERVED_SURFACES = (Surface.MCP, Surface.OPENAPI)


class RateLimited(Exception):
    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


def _retry_after(recent: QuerySet[Invocation], limit: int, now) -> int:
    # The call that must leave the window before another fits.
    oldest = recent.order_by("-created_at").values_list("created_at", flat=True)[limit - 1:limit].first()
    if oldest is None:
        return 1
    return max(1, math.ceil((oldest + WINDOW - now).total_seconds()))


def _check(recent: QuerySet[Invocation], limit: int, what: str, now) -> None:
    if limit <= 0:
        return
    if recent.count() >= limit:
        retry = _retry_after(recent, limit, now)
        raise RateLimited(f"Rate limit reached: at most {limit} calls a minute {what}; try again in {retry} s.", retry)


def check_rate(caller: Caller) -> None:
    """Raises RateLimited when the caller's client or user is at its limit."""
    now = timezone.now()
    since = now - WINDOW
    client = caller.client
    if client is not None:
        limit = client.calls_per_minute if client.calls_per_minute is not None else settings.TOOLHUB_CLIENT_CALLS_PER_MINUTE
        _check(Invocation.objects.filter(client=client, created_at__gte=since), limit, "for this client", now)
    user_limit = settings.TOOLHUB_USER_CALLS_PER_MINUTE
    if client is not None and client.user_calls_per_minute is not None:
        user_limit = client.user_calls_per_minute
    recent = Invocation.objects.filter(user=caller.user, surface__in=SERVED_SURFACES, created_at__gte=since)
    _check(recent, user_limit, "for each user", now)
