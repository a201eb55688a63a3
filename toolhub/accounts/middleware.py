"""A signed-in user's language follows them from browser to browser.

Django's LocaleMiddleware picks the language from the `django_language` cookie, then the
browser's Accept-Language. That cookie lives in one browser only, so the language a user
chose is also kept in their Profile (toolhub.toolkits.views_i18n.set_language saves it), and
this middleware, placed after AuthenticationMiddleware, makes it win for their requests.

The saved choice is read once per session and then kept in the session, so ordinary
requests cost no extra query."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import translation

from toolhub.accounts.models import Profile

# The session key holding the signed-in user's saved language ("" for none saved).
LANGUAGE_SESSION_KEY = "toolhub_language"


def remember_language(request: HttpRequest, language: str) -> None:
    """Save a signed-in user's choice in their profile and in the current session."""
    Profile.objects.update_or_create(user=request.user, defaults={"language": language})
    request.session[LANGUAGE_SESSION_KEY] = language


def saved_language(request: HttpRequest) -> str:
    """The language the signed-in user chose, or "" (anonymous, or never chose)."""
    user = getattr(request, "user", None)
    session = getattr(request, "session", None)
    if user is None or session is None or not user.is_authenticated:
        return ""
    if LANGUAGE_SESSION_KEY not in session:
        profile = Profile.objects.filter(user=user).only("language").first()
        session[LANGUAGE_SESSION_KEY] = profile.language if profile else ""
    return session[LANGUAGE_SESSION_KEY] or ""


class UserLanguageMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        language = saved_language(request)
        # A language dropped from settings.LANGUAGES since it was saved is ignored.
        if language and translation.check_for_language(language) and language in dict(settings.LANGUAGES):
            translation.activate(language)
            request.LANGUAGE_CODE = translation.get_language()
        return self.get_response(request)
