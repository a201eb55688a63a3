from __future__ import annotations

from ninja.errors import HttpError
from ninja.security import HttpBearer, SessionAuth

from toolhub.accounts.clients import CallerRefused, resolve_caller


class TokenAuth(HttpBearer):
    """A person's API token or a client credential (toolhub.accounts.clients)."""

    def authenticate(self, request, token: str):
        try:
            caller = resolve_caller(token=token, headers=request.headers)
        except CallerRefused as exc:
            if exc.status == 401:
                return None
            raise HttpError(exc.status, exc.message) from None
        request.user = caller.user
        request.toolhub_client = caller.client
        return caller.user


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
