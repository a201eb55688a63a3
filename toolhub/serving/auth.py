"""Bearer authentication for the tool servers, through the one helper the API uses too."""

from __future__ import annotations

from collections.abc import Mapping

from toolhub.accounts.clients import Caller, CallerRefused, resolve_caller


def bearer_token(headers: Mapping[str, str]) -> str:
    value = headers.get("Authorization") or headers.get("authorization") or ""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class _Joined:
    """Starlette's headers read as Django reads them: a header sent twice is one value with
    the two joined by a comma (so toolhub.accounts.clients.identity_header refuses it alike)."""

    def __init__(self, headers) -> None:
        self.headers = headers

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.headers.getlist(name)
        return ",".join(values) if values else default


def caller_from_headers(headers: Mapping[str, str]) -> Caller:
    """Raises CallerRefused (401 without a valid token, 403 for a user it may not act as,
    400 for an identity header sent twice)."""
    token = bearer_token(headers)
    if not token:
        raise CallerRefused(401, "Authentication required: send a bearer token.")
    return resolve_caller(token=token, headers=_Joined(headers) if hasattr(headers, "getlist") else headers)
