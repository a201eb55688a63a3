"""Who may call the API, and through which endpoints.

A person's API token and the browser session carry that person's rights. A client
credential (an LLM app's) only calls tools: it is accepted on the endpoints a calling app
needs (`SERVING_AUTH`: listing and reading toolkits as its person sees them, invoking,
following, answering and cancelling its own invocations) and refused with 403 on every other
one, whoever it acts for. Refusal is the default: an endpoint that does not name
`SERVING_AUTH` is closed to client credentials."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer, SessionAuth

from toolhub.accounts.clients import CallerRefused, resolve_caller

CLIENT_REFUSED = (
    "A client credential cannot do this: it only calls tools (MCP, the OpenAPI tool servers, invoking and "
    "following its own invocations). Use a person's API token to manage ToolHub."
)


class TokenAuth(HttpBearer):
    """A person's API token, or a client credential where `serving` allows one
    (toolhub.accounts.clients.resolve_caller)."""

    def __init__(self, *, serving: bool = False) -> None:
        super().__init__()
        self.serving = serving

    def authenticate(self, request: HttpRequest, token: str) -> User | None:
        try:
            caller = resolve_caller(token=token, headers=request.headers)
        except CallerRefused as exc:
            if exc.status == 401:
                return None
            raise HttpError(exc.status, exc.message) from None
        if caller.client is not None and not self.serving:
            raise HttpError(403, CLIENT_REFUSED)
        request.user = caller.user
        request.toolhub_client = caller.client  # type: ignore[attr-defined]  # read with getattr: a session sets none
        return caller.user


class BrowserSession(SessionAuth):
    """The browser's session, with Django's CSRF check on unsafe methods."""

    def _get_key(self, request: HttpRequest) -> str | None:
        # The CSRF check protects a signed-in browser. A caller without a session (a script
        # with a missing or wrong token) must get 401, not a CSRF 403 that hides the cause.
        if not request.user.is_authenticated:
            return None
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None) -> User | None:
        user = super().authenticate(request, key)
        return user if user is not None and user.is_active else None


# Every endpoint's default: people only.
DEFAULT_AUTH = [TokenAuth(), BrowserSession()]
# The endpoints an LLM app's client credential may call too.
SERVING_AUTH = [TokenAuth(serving=True), BrowserSession()]
