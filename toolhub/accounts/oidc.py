"""Sign-in with the organisation's identity provider (OpenID Connect), through mozilla-django-oidc.

The provider is found by discovery (`<issuer>/.well-known/openid-configuration`), read when
someone signs in and kept for an hour. The email is the identity: the first sign-in creates the
person with it; every sign-in sets their groups and role from the claims (when the groups claim
is present). A person deactivated in ToolHub, or whose email's domain is not allowed, is refused
with a message that says why. Settings: the `# OIDC` section of toolhub/settings.py;
docs/people.md explains them."""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from typing import Any

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from toolhub.accounts import people
from toolhub.accounts.models import AUTHORS_GROUP, Profile, Source

logger = logging.getLogger(__name__)

# What the sessions of people signed in through the provider are kept with: the usual backend
# (it refuses inactive people and reads the profile with the user).
SESSION_BACKEND = "toolhub.accounts.middleware.UserLanguageBackend"
DISCOVERY_TTL = 3600
MAX_CLAIMED_GROUPS = 200
_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
_discovered: dict[str, tuple[float, dict]] = {}
_lock = threading.Lock()


def enabled() -> bool:
    return bool(settings.TOOLHUB_OIDC_ISSUER)


def local_passwords() -> bool:
    """Whether the password form is offered: always without OIDC, else as the setting says."""
    return not enabled() or settings.TOOLHUB_OIDC_LOCAL_PASSWORDS


def discovery() -> dict:
    """The provider's configuration document, fetched at most once an hour per issuer."""
    issuer = settings.TOOLHUB_OIDC_ISSUER.rstrip("/")
    with _lock:
        cached = _discovered.get(issuer)
        if cached and time.monotonic() - cached[0] < DISCOVERY_TTL:
            return cached[1]
    response = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=settings.OIDC_TIMEOUT)
    response.raise_for_status()
    document = response.json()
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
        # OpenID Connect Discovery 1.0, 4.3: the issuer in the document must be the one asked.
        raise ImproperlyConfigured("The OIDC discovery document names another issuer.")
    missing = [key for key in _ENDPOINTS.values() if not isinstance(document.get(key), str)]
    if missing:
        raise ImproperlyConfigured(f"The OIDC discovery document lacks {', '.join(missing)}.")
    with _lock:
        _discovered[issuer] = (time.monotonic(), document)
    return document


def _setting(attr: str, *args: Any) -> Any:
    if attr in _ENDPOINTS:
        return discovery()[_ENDPOINTS[attr]]
    return import_from_settings(attr, *args)


class Refused(SuspiciousOperation):
    """A sign-in refused for a reason the person should read."""


def _username_for(email: str) -> str:
    users = get_user_model()
    local = re.sub(r"[^\w.@+-]", "", email.split("@", 1)[0])[:100] or "user"
    if not users.objects.filter(username__iexact=local).exists():
        return local
    return f"{local}_{secrets.token_hex(3)}"


def _claimed_groups(claims: dict) -> list[str] | None:
    """The group names in the configured claim; None when the claim is absent."""
    value = claims.get(settings.TOOLHUB_OIDC_GROUPS_CLAIM)
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    names = [v.strip() for v in value if isinstance(v, str) and v.strip() and len(v.strip()) <= people.MAX_GROUP_NAME]
    return sorted(set(names))[:MAX_CLAIMED_GROUPS]


class ToolHubOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's code flow, with the endpoints from discovery and ToolHub's rules on
    who may sign in and what their claims make them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django makes a backend for every authenticate() (password logins too): the provider is
        # asked only when an OIDC callback is being handled, in authenticate below.
        self.UserModel = get_user_model()

    get_settings = staticmethod(_setting)

    def authenticate(self, request, **kwargs):
        if request is None or "nonce" not in kwargs or not enabled():
            return None  # Not an OIDC callback (a password login, an API call).
        self.OIDC_OP_TOKEN_ENDPOINT = _setting("OIDC_OP_TOKEN_ENDPOINT")
        self.OIDC_OP_USER_ENDPOINT = _setting("OIDC_OP_USER_ENDPOINT")
        self.OIDC_OP_JWKS_ENDPOINT = _setting("OIDC_OP_JWKS_ENDPOINT")
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        user = super().authenticate(request, **kwargs)
        if user is not None:
            user.backend = SESSION_BACKEND
        return user

    def verify_claims(self, claims: dict) -> bool:
        email = claims.get("email")
        if not isinstance(email, str) or "@" not in email or len(email) > people.MAX_EMAIL:
            raise Refused(_("The identity provider did not give an email address."))
        if claims.get("email_verified") is False:
            raise Refused(_("The identity provider has not verified this email address."))
        domain = email.rsplit("@", 1)[1].lower()
        allowed = [d.lower().lstrip("@") for d in settings.TOOLHUB_OIDC_ALLOWED_DOMAINS]
        if allowed and domain not in allowed:
            raise Refused(_("Accounts of %(domain)s may not sign in to ToolHub.") % {"domain": domain})
        return True

    def filter_users_by_claims(self, claims: dict):
        # Client credentials' service users have no email; people are matched case-insensitively.
        return self.UserModel.objects.filter(email__iexact=claims["email"], client_credential__isnull=True)

    def get_or_create_user(self, access_token, id_token, payload):
        # mozilla-django-oidc turns a SuspiciousOperation from here into a silent failure; the
        # reason is kept on the request for the login page (CallbackView.login_failure).
        try:
            return super().get_or_create_user(access_token, id_token, payload)
        except Refused as exc:
            self.request.toolhub_oidc_refusal = str(exc)
            raise
        except SuspiciousOperation as exc:
            if "Multiple users" in str(exc):
                reason = _("More than one ToolHub account has this email; an admin must resolve it.")
                self.request.toolhub_oidc_refusal = reason
                raise Refused(reason) from None
            raise

    def create_user(self, claims: dict):
        users = self.UserModel
        for _attempt in range(3):
            try:
                with transaction.atomic():
                    # As everywhere people are made: one person per email, also when two first
                    # sign-ins of the same person race (toolhub.accounts.people).
                    people._lock_email(claims["email"])
                    existing = self.filter_users_by_claims(claims).first()
                    if existing is not None:
                        return self.update_user(existing, claims)
                    user = users(username=_username_for(claims["email"]), email=claims["email"])
                    user.set_unusable_password()
                    user.save()
                    Profile.objects.update_or_create(user=user, defaults={"source": Source.OIDC})
                    _apply_claims(user, claims)
                    return user
            except IntegrityError:
                existing = users.objects.filter(email__iexact=claims["email"]).first()
                if existing is not None:
                    return self.update_user(existing, claims)
        raise Refused(_("Could not create a ToolHub account for this email."))

    def update_user(self, user, claims: dict):
        if not user.is_active:
            raise Refused(_("This account is deactivated in ToolHub; ask an admin."))
        with transaction.atomic():
            Profile.objects.update_or_create(user=user, defaults={"source": Source.OIDC})
            _apply_claims(user, claims)
        return user


def _apply_claims(user, claims: dict) -> None:
    """Groups and role from the groups claim; nothing changes when the claim is absent."""
    names = _claimed_groups(claims)
    if names is None:
        return
    mapped = [n for n in names if n != AUTHORS_GROUP]
    if settings.TOOLHUB_OIDC_CREATE_GROUPS:
        groups = [Group.objects.get_or_create(name=n)[0] for n in mapped]
    else:
        groups = list(Group.objects.filter(name__in=mapped))
    claimed = set(names)
    if claimed & set(settings.TOOLHUB_OIDC_ADMIN_GROUPS):
        role = "admin"
    elif claimed & set(settings.TOOLHUB_OIDC_AUTHOR_GROUPS):
        role = "author"
    else:
        role = "user"
    if user.is_staff and role != "admin":
        try:
            people._guard_last_admin(user)
        except people.PeopleError:
            logger.warning("OIDC claims would demote %s, the last active admin; kept an admin", user.username)
            role = "admin"
    people._set_role(user, role)  # type: ignore[arg-type]
    people._set_groups(user, groups)


class LoginView(OIDCAuthenticationRequestView):
    """The redirect to the provider, with its authorization endpoint from discovery."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    get_settings = staticmethod(_setting)

    def get(self, request):
        if not enabled():
            return HttpResponseRedirect(reverse("login"))
        try:
            self.OIDC_OP_AUTH_ENDPOINT = _setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except (requests.RequestException, ValueError, ImproperlyConfigured) as exc:
            logger.warning("OIDC discovery failed: %s", exc)
            messages.error(request, _("The identity provider cannot be reached right now; try again in a moment."))
            return HttpResponseRedirect(reverse("login"))
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    """Back from the provider: signed in, or back to the login page saying why not."""

    get_settings = staticmethod(_setting)

    def login_failure(self):
        request: HttpRequest = self.request
        reason = getattr(request, "toolhub_oidc_refusal", None)
        messages.error(request, reason or _("Signing in with the identity provider failed; try again."))
        return HttpResponseRedirect(reverse("login"))

    def get(self, request):
        if not enabled():
            return HttpResponseRedirect(reverse("login"))
        try:
            return super().get(request)
        except (requests.RequestException, ValueError, ImproperlyConfigured, SuspiciousOperation) as exc:
            # The provider failed or answered something unusable; the reason goes to the log
            # (never the tokens), the person gets a plain message.
            logger.warning("OIDC sign-in failed: %s", type(exc).__name__)
            return self.login_failure()
