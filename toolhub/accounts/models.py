from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

AUTHORS_GROUP = "Toolkit authors"
TOKEN_PREFIX = "th_"


def hash_token(raw: str) -> str:
    # Tokens are 256-bit random values, so a plain SHA-256 is enough: there is nothing
    # to brute-force that a slow hash would protect.
    return hashlib.sha256(raw.encode()).hexdigest()


class Source(models.TextChoices):
    """Where a person signs in: a ToolHub password, or the organisation's identity provider."""

    LOCAL = "local"
    OIDC = "oidc"


class Profile(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    language = models.CharField(max_length=10, blank=True)
    # A person without a profile is local (the profile is made on first need).
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.LOCAL)


class Invitation(models.Model):
    """A link that lets a new person choose their password once, until it expires. Only the
    digest is kept: the link is shown once, to the admin who made it (no mail is configured)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="invitations")
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True)


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # The first characters of the token, shown so people can tell their tokens apart.
    prefix = models.CharField(max_length=12)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, *, user, name: str) -> tuple[ApiToken, str]:
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, prefix=raw[:10], digest=hash_token(raw))
        return token, raw

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


CLIENT_TOKEN_PREFIX = "thc_"
# The header Open WebUI sends with ENABLE_FORWARD_USER_INFO_HEADERS; LibreChat sends
# whatever its librechat.yaml names (docs/connect.md uses X-User-Email).
DEFAULT_USER_HEADER = "X-OpenWebUI-User-Email"


class ClientCredentialQuerySet(models.QuerySet):
    def active(self) -> ClientCredentialQuerySet:
        return self.filter(revoked_at__isnull=True)


class ClientCredential(models.Model):
    """The credential of one LLM application ("Open WebUI production"), created by an admin.

    Without `acts_for_users` the app calls as its own service user, which has no UserValves.
    With it, a request naming a user by email in `user_header` runs as that ToolHub user.
    Whoever it acts for, it only calls tools: it reaches the serving surfaces (MCP, the
    OpenAPI tool servers, invoking and following its own invocations) and nothing that
    manages ToolHub."""

    name = models.CharField(max_length=100, unique=True)
    prefix = models.CharField(max_length=12)
    digest = models.CharField(max_length=64, unique=True)
    acts_for_users = models.BooleanField(default=False)
    # Acting for a staff user is refused unless an admin ticked this; even then the
    # credential reaches only the serving surfaces (toolhub.api.auth.SERVING_AUTH).
    may_act_for_admins = models.BooleanField(default=False)
    user_header = models.CharField(max_length=100, default=DEFAULT_USER_HEADER, blank=True)
    create_users = models.BooleanField(default=False)
    # Calls per minute through MCP and OpenAPI, for the whole client and for each user it
    # acts for; empty means the TOOLHUB_CLIENT_CALLS_PER_MINUTE / TOOLHUB_USER_CALLS_PER_MINUTE
    # defaults.
    calls_per_minute = models.PositiveIntegerField(null=True, blank=True)
    user_calls_per_minute = models.PositiveIntegerField(null=True, blank=True)
    service_user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="client_credential"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ClientCredentialQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class LoginFailure(models.Model):
    """One failed password login, kept for the throttling window (toolhub.accounts.throttle)."""

    # The username as typed, lower-cased and cut to the field's length.
    username = models.CharField(max_length=150, db_index=True)
    ip = models.GenericIPAddressField(null=True, blank=True, db_index=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)
