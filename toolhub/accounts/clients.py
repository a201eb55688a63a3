"""Client credentials of LLM applications, and the one helper that tells who is calling.

Every machine-facing surface (the API, MCP, the OpenAPI tool servers) authenticates a bearer
token through `resolve_caller`, so a person's API token and a client credential mean the same
thing everywhere."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from toolhub import plainsql
from toolhub.accounts.models import (
    CLIENT_TOKEN_PREFIX,
    DEFAULT_USER_HEADER,
    ApiToken,
    ClientCredential,
    hash_token,
)

# An HTTP header name (RFC 9110 token characters), bounded.
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
MAX_EMAIL = 254
# What a client credential reaches, whoever it acts for (toolhub.api.auth.SERVING_AUTH and the
# tool servers); the credential pages and the API show it.
CLIENT_SCOPE = (
    "/mcp and /mcp/{slug}",
    "/openapi and /openapi/{slug}",
    "GET /api/v1/toolkits and /api/v1/toolkits/{slug}",
    "POST /api/v1/toolkits/{slug}/tools/{tool}/invoke",
    "GET /api/v1/invocations/{id} and its events, POST …/respond and …/cancel (its own invocations)",
)
MAX_RATE = 100_000
# No token, and a token that is not (or no longer) valid, get different answers: the caller
# who sent one needs to know it was looked at and refused, not that it went missing.
NO_TOKEN = "Authentication required: send a bearer token."
INVALID_TOKEN = "The bearer token is not valid: it is unknown, revoked or mistyped."
M = TypeVar("M", bound=Model)


class InvalidClient(ValueError):
    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class ClientNameTaken(InvalidClient):
    pass


class CallerRefused(Exception):
    """Authentication failed (401) or the caller may not act as it asks (403)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Caller:
    """Who a request calls as: `user` always; `client` when an app's credential made the
    request (for itself or for the person `user`); `token_id` when it was a person's own API
    token."""

    user: Any
    client: ClientCredential | None = None
    token_id: int | None = None

    def principal(self) -> tuple[str, str]:
        """The credential and the person, as the MCP SDK compares them to bind a session to
        whoever opened it: the same app acting for another person is another principal."""
        credential = f"client:{self.client.pk}" if self.client is not None else f"token:{self.token_id}"
        return credential, str(self.user.pk)


def identity_header(headers, name: str) -> str:
    """The one value of an identity header, "" when it is absent. Sent twice it is refused
    (400) on every surface alike: Django and Starlette would read it differently (joined with
    commas, or the first value), and no email address holds a comma."""
    value = headers.get(name) or ""
    if "," in value:
        raise CallerRefused(400, f"The {name} header was sent more than once (or holds a comma); send one email address.")
    return value.strip()


def client_create(
    *, name: str, acts_for_users: bool = False, user_header: str = DEFAULT_USER_HEADER,
    create_users: bool = False, by=None, calls_per_minute: int | None = None, user_calls_per_minute: int | None = None,
    may_act_for_admins: bool = False,
) -> tuple[ClientCredential, str]:
    """A new credential and its raw token, which is never stored and must be shown once.
    Empty limits mean the settings' defaults; 0 switches a limit off."""
    for field, value in (("calls_per_minute", calls_per_minute), ("user_calls_per_minute", user_calls_per_minute)):
        if value is not None and not (isinstance(value, int) and 0 <= value <= MAX_RATE):
            raise InvalidClient(f"{field} must be a whole number from 0 to {MAX_RATE}.", field)
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise InvalidClient("A name of 1 to 100 characters is required.", "name")
    user_header = (user_header or "").strip()
    if acts_for_users and not _HEADER_NAME.match(user_header):
        raise InvalidClient("user_header must be an HTTP header name.", "user_header")
    if user_header and not _HEADER_NAME.match(user_header):
        raise InvalidClient("user_header must be an HTTP header name.", "user_header")
    if ClientCredential.objects.filter(name=name).exists():
        raise ClientNameTaken("A client with this name exists.", "name")
    raw = CLIENT_TOKEN_PREFIX + secrets.token_urlsafe(32)
    users = get_user_model()
    try:
        with transaction.atomic():
            # The app's own identity: it has no password, no role and no UserValves.
            service = users.objects.create_user(f"client_{secrets.token_hex(6)}", email="")
            service.set_unusable_password()
            service.save(update_fields=["password"])
            credential = ClientCredential.objects.create(
                name=name, prefix=raw[:11], digest=hash_token(raw), acts_for_users=bool(acts_for_users),
                user_header=user_header, create_users=bool(create_users and acts_for_users),
                may_act_for_admins=bool(may_act_for_admins and acts_for_users),
                service_user=service, created_by=by, calls_per_minute=calls_per_minute,
                user_calls_per_minute=user_calls_per_minute,
            )
    except IntegrityError:
        raise ClientNameTaken("A client with this name exists.", "name") from None
    return credential, raw


def client_revoke(*, client: ClientCredential) -> None:
    if client.revoked_at is None:
        ClientCredential.objects.filter(pk=client.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        client.revoked_at = timezone.now()


def _touch(model, row) -> None:
    # The last-used time is written at most once a minute per credential.
    now = timezone.now()
    if row.last_used_at is None or (now - row.last_used_at).total_seconds() > 60:
        model.objects.filter(pk=row.pk).update(last_used_at=now)


def resolve_caller(*, token: str, headers) -> Caller:
    """Who a bearer token calls as. `headers` is a case-insensitive mapping (request.headers).

    A person's API token → that person. A client credential → its service user, or, when it
    may act for users and the request names one in its header, the active ToolHub user with
    that email (created on first use if the admin allowed it); an admin only when the
    credential may act for admins. What a client credential may reach is the caller's
    business (toolhub.api.auth, the serving surfaces): it calls tools, it never manages."""
    if not token:
        raise CallerRefused(401, NO_TOKEN)
    if len(token) > 200:
        raise CallerRefused(401, INVALID_TOKEN)
    digest = hash_token(token)
    # A client credential's token says so (a person's starts with TOKEN_PREFIX, never with
    # CLIENT_TOKEN_PREFIX): the LLM apps' calls, most of all calls, skip people's tokens.
    if not token.startswith(CLIENT_TOKEN_PREFIX):
        row = _with_user(ApiToken, "user", digest)
        if row is not None:
            if not row.user.is_active:
                raise CallerRefused(401, INVALID_TOKEN)
            _touch(ApiToken, row)
            return Caller(user=row.user, token_id=row.pk)
    client = _with_user(ClientCredential, "service_user", digest)
    if client is None or not client.is_active or not client.service_user.is_active:
        raise CallerRefused(401, INVALID_TOKEN)
    _touch(ClientCredential, client)
    if not (client.acts_for_users and client.user_header):
        # Without the right, a user header is ignored: the app calls as itself.
        return Caller(user=client.service_user, client=client)
    email = identity_header(headers, client.user_header)
    if not email:
        return Caller(user=client.service_user, client=client)
    user = _user_for_email(client, email)
    if (user.is_staff or user.is_superuser) and not client.may_act_for_admins:
        raise CallerRefused(
            403, "This client credential may not act for admins; an admin can allow it on the credential (to call tools only)."
        )
    return Caller(user=user, client=client)


@cache
def _with_user_read(vendor: str, model: type[Model], user_field: str) -> tuple[str, tuple[plainsql.Part, ...]]:
    """The statement _with_user reads a credential and its user with (toolhub.plainsql: every
    call authenticates, and the ORM's select_related cost more in compiling than the read), and
    its parts."""
    users = get_user_model()
    parts = (plainsql.Part.of(model, "c"), plainsql.Part.of(users, "u"))
    sql = (
        f"SELECT {', '.join(part.select() for part in parts)} FROM {plainsql.table(model)} c JOIN {plainsql.table(users)} u"
        f" ON u.{plainsql.column(users, users._meta.pk.attname)} = c.{plainsql.column(model, user_field)}"
        f" WHERE c.{plainsql.column(model, 'digest')} = %s"
    )
    if model is ApiToken:
        # ApiToken.objects.active(): a revoked token is as good as unknown.
        sql += f" AND c.{plainsql.column(model, 'revoked_at')} IS NULL"
    return sql, parts


def _with_user(model: type[M], user_field: str, digest: str) -> M | None:
    """The credential of `model` with this digest and its user (`user_field`) attached, in one
    query; None when there is none."""
    sql, parts = _with_user_read(connection.vendor, model, user_field)
    row = plainsql.one_row(sql, [digest])
    if row is None:
        return None
    credential, user = plainsql.instances(row, parts)
    setattr(credential, user_field, user)
    return credential


def _user_for_email(client: ClientCredential, email: str):
    if len(email) > MAX_EMAIL or "@" not in email or any(c.isspace() or ord(c) < 32 for c in email):
        raise CallerRefused(403, f"The {client.user_header} header does not hold an email address.")
    users = get_user_model()
    matches = list(users.objects.filter(email__iexact=email)[:2])
    if len(matches) > 1:
        raise CallerRefused(403, "More than one ToolHub user has this email; an admin must resolve it.")
    if matches:
        if not matches[0].is_active:
            raise CallerRefused(403, "This ToolHub user is deactivated.")
        return matches[0]
    if not client.create_users:
        raise CallerRefused(403, "No ToolHub user has this email; an admin must create one first.")
    return _create_user(email)


def _create_user(email: str):
    users = get_user_model()
    local = re.sub(r"[^\w.@+-]", "", email.split("@", 1)[0])[:100] or "user"
    for attempt in range(5):
        username = local if attempt == 0 else f"{local}_{secrets.token_hex(3)}"
        try:
            with transaction.atomic():
                user = users.objects.create_user(username, email=email)
                user.set_unusable_password()
                user.save(update_fields=["password"])
                return user
        except IntegrityError:
            # The same email may have been created by a concurrent first call.
            existing = users.objects.filter(email__iexact=email).first()
            if existing is not None:
                return existing
    raise CallerRefused(403, "Could not create a ToolHub user for this email.")
