from __future__ import annotations

from django.utils import timezone
from ninja.security import HttpBearer, SessionAuth

from toolhub.accounts.models import ApiToken, hash_token


class TokenAuth(HttpBearer):
    def authenticate(self, request, token: str):
        row = ApiToken.objects.active().select_related("user").filter(digest=hash_token(token)).first()
        if row is None or not row.user.is_active:
            return None
        # Write the last-used time at most once a minute per token.
        now = timezone.now()
        if row.last_used_at is None or (now - row.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        request.user = row.user
        return row.user


class BrowserSession(SessionAuth):
    """The browser's session, with Django's CSRF check on unsafe methods."""

    def _get_key(self, request):
        # The CSRF check protects a signed-in browser. A caller without a session (a script
        # with a missing or wrong token) must get 401, not a CSRF 403 that hides the cause.
        if not request.user.is_authenticated:
            return None
        return super()._get_key(request)

    def authenticate(self, request, key):
        user = super().authenticate(request, key)
        return user if user is not None and user.is_active else None
