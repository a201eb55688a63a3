"""Helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations


def bearer_headers(user, *, name: str = "tests") -> dict[str, str]:
    """Django test-client headers with a fresh API token of `user`."""
    from toolhub.accounts.models import ApiToken

    _token, raw = ApiToken.issue(user=user, name=name)
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
