"""A strict Content-Security-Policy and a Permissions-Policy on every response (Django's
SecurityMiddleware adds nosniff, Referrer-Policy and Cross-Origin-Opener-Policy, and behind
`TOOLHUB_HTTPS` HSTS and the HTTPS redirect; see settings).

The policy allows scripts from ToolHub's own origin only (`script-src 'self'`): no inline
`<script>`, no `on...=` handler attributes, no `eval` (htmx's `allowEval` and
`allowScriptTags` are off, see templates/base.html). Every script lives in static/js/.
Styles may be inline (the source editor writes its own), images may be data: URLs, and the
pages may not be framed, post forms elsewhere, or load plugins."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class SecurityHeadersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.TOOLHUB_CSP:
            response.headers.setdefault("Content-Security-Policy", POLICY)
        response.headers.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
        return response
