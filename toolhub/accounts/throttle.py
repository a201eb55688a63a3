"""Failed-login throttling for the password login page.

Failures are counted in the database, so every web process (gunicorn workers, several hosts)
sees the same counts. Within `TOOLHUB_LOGIN_WINDOW_SECONDS` a username is locked after
`TOOLHUB_LOGIN_MAX_FAILURES` failed attempts from anywhere, and an address after
`TOOLHUB_LOGIN_MAX_FAILURES_PER_IP` failed attempts for any usernames. A locked login is refused
before the password is checked (the right password does not help; the page answers 429 and says
when to try again), so the lock cannot be used to test passwords. A successful login clears the
username's failures. Rows older than the window are deleted as new failures are written.
"""

from __future__ import annotations

import math
from datetime import timedelta

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone

from toolhub.accounts.models import LoginFailure


def _key(username: str) -> str:
    return (username or "").strip().lower()[:150]


def client_ip(request: HttpRequest | None) -> str | None:
    if request is None:
        return None
    return request.META.get("REMOTE_ADDR") or None


def locked_for(*, username: str, ip: str | None) -> int:
    """Seconds until a login for ``username`` from ``ip`` may be tried again; 0 when it may now."""
    window = timedelta(seconds=settings.TOOLHUB_LOGIN_WINDOW_SECONDS)
    now = timezone.now()
    since = now - window
    waits = [0]
    checks = [(LoginFailure.objects.filter(username=_key(username), at__gte=since), settings.TOOLHUB_LOGIN_MAX_FAILURES)]
    if ip:
        checks.append((LoginFailure.objects.filter(ip=ip, at__gte=since), settings.TOOLHUB_LOGIN_MAX_FAILURES_PER_IP))
    for failures, limit in checks:
        recent = failures.order_by("-at").values_list("at", flat=True)[:limit]
        times = list(recent)
        if len(times) >= limit:
            # The lock lasts until the oldest of the last `limit` failures leaves the window.
            waits.append(math.ceil((min(times) + window - now).total_seconds()))
    return max(0, *waits)


def record_failure(*, username: str, ip: str | None) -> None:
    now = timezone.now()
    LoginFailure.objects.filter(at__lt=now - timedelta(seconds=settings.TOOLHUB_LOGIN_WINDOW_SECONDS)).delete()
    LoginFailure.objects.create(username=_key(username), ip=ip, at=now)


def clear(*, username: str) -> None:
    LoginFailure.objects.filter(username=_key(username)).delete()


__all__ = ["clear", "client_ip", "locked_for", "record_failure"]
