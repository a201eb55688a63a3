"""A signed-in user's language follows them from browser to browser.

Django's LocaleMiddleware picks the language from the `django_language` cookie, then the
browser's Accept-Language. That cookie lives in one browser only, so the language a user
chose is also kept in their Profile (toolhub.toolkits.views.i18n.set_language saves it), and
`UserLanguageMiddleware`, placed after AuthenticationMiddleware, makes it win for their
requests.

`UserLanguageBackend` loads the profile together with the user, in the query Django makes
for every signed-in request anyway, so remembering the language costs no query of its own
and a choice made in one browser shows in the others on their next request."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest, HttpResponse
from django.utils import translation

from toolhub.accounts.models import Profile


class UserLanguageBackend(ModelBackend):
    """Django's ModelBackend, fetching the user's profile in the same query."""

    def get_user(self, user_id):
        user = get_user_model()._default_manager.select_related("profile").filter(pk=user_id).first()
        return user if user is not None and self.user_can_authenticate(user) else None


def remember_language(*, user, language: str) -> None:
    """Save a signed-in user's choice of language."""
    Profile.objects.update_or_create(user=user, defaults={"language": language})


def saved_language(user) -> str:
    """The language a signed-in user chose, or "" (anonymous, or never chose)."""
    if user is None or not user.is_authenticated:
        return ""
    try:
        return user.profile.language
    except Profile.DoesNotExist:
        return ""


class UserLanguageMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        language = saved_language(getattr(request, "user", None))
        # A language dropped from settings.LANGUAGES since it was saved is ignored.
        if language in dict(settings.LANGUAGES) and translation.check_for_language(language):
            translation.activate(language)
            request.LANGUAGE_CODE = translation.get_language()
        return self.get_response(request)
