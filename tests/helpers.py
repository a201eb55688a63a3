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


def ready_string_reverse(upload, owner, *, tools: list[dict]):
    """`owner`'s string_reverse demo toolkit, ready, with `tools` as introspection would have
    found them (no build, no sandbox): for the tests of what comes after a toolkit is ready."""
    import copy

    from tests.conftest import example
    from toolhub.toolkits.models import Status

    toolkit = upload(owner, example("string_reverse"))
    revision = toolkit.current_revision
    revision.tools = copy.deepcopy(tools)
    revision.set_status(Status.READY)
    revision.save()
    return toolkit


def reverse_tool(parameters: dict, *, description: str = "") -> dict:
    """The `reverse_string` tool with these parameters, as introspection lists it."""
    return {"type": "function", "function": {"name": "reverse_string", "description": description, "parameters": parameters}}
