"""Bearer authentication for the tool servers, through the one helper the API uses too."""

from __future__ import annotations

from collections.abc import Mapping

from toolhub.accounts.clients import Caller, CallerRefused, resolve_caller


def bearer_token(headers: Mapping[str, str]) -> str:
    value = headers.get("Authorization") or headers.get("authorization") or ""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def caller_from_headers(headers: Mapping[str, str]) -> Caller:
    """Raises CallerRefused (401 without a valid token, 403 for a user it may not act as)."""
    token = bearer_token(headers)
    if not token:
        raise CallerRefused(401, "Authentication required: send a bearer token.")
    return resolve_caller(token=token, headers=headers)
