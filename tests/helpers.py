"""Helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def bearer_headers(user, *, name: str = "tests") -> dict[str, str]:
    """Django test-client headers with a fresh API token of `user`."""
    from toolhub.accounts.models import ApiToken

    _token, raw = ApiToken.issue(user=user, name=name)
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


@contextmanager
def broker_at(url: str) -> Iterator[None]:
    """Point this process's Celery app at another broker (a private redis-server, or a port
    where none listens) for the `with` block.

    The app caches its connection and producer pools, which would still reach the real
    broker, so the cached references are dropped on the way in and out. The pools
    themselves live in kombu's registry, keyed by broker URL, and are left open: the real
    one is picked up again afterwards."""
    from toolhub.celery import app

    def reset_pools() -> None:
        app._pool = None
        app.amqp._producer_pool = None

    saved = app.conf.broker_url
    reset_pools()
    app.conf.broker_url = url
    try:
        yield
    finally:
        reset_pools()
        app.conf.broker_url = saved
