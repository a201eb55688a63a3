"""ToolHub as an ASGI application: Django for everything, except `/mcp` and `/mcp/{slug}`,
which the official MCP SDK's Streamable HTTP app serves (toolhub.serving.mcp).

Serve it with uvicorn (`make run` does: `uvicorn toolhub.asgi:application`)."""

from __future__ import annotations

import os

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings")
# The web server keeps its database connections in a pool (see TOOLHUB_DB_POOL in settings).
os.environ.setdefault("TOOLHUB_DB_POOL", "1")


class OneThreadHandler(ASGIHandler):
    """Django's ASGI handler, with the middleware and the view called in one go on the
    request's thread, as under WSGI.

    Every view of ToolHub is synchronous, and so is some of the middleware (WhiteNoise's and
    ToolHub's own). Left to Django, the chain is built for an async server: the request goes
    from the event loop to its thread at the outermost synchronous middleware, back to the
    loop below the innermost one, and over to the thread again for CSRF's view check and for
    the view, each crossing with a future, a copied context and a wake-up of the loop. Built
    as for WSGI and called through one `sync_to_async`, a request crosses once. The thread per
    request stays (`ThreadSensitiveContext`, in `__call__`): one slow view holds up no other."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain = self._middleware_chain  # type: ignore[has-type]  # set by load_middleware, untyped in the stubs
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)


def _django_application() -> OneThreadHandler:
    django.setup(set_prefix=False)
    return OneThreadHandler()


django_app = _django_application()

from toolhub.serving import mcp  # noqa: E402 - needs the apps loaded by get_asgi_application.


async def _lifespan(scope, receive, send) -> None:
    # The MCP session manager runs for as long as the server does.
    message = await receive()
    assert message["type"] == "lifespan.startup"
    try:
        async with mcp.lifespan():
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
            assert message["type"] == "lifespan.shutdown"
    except BaseException as exc:  # noqa: BLE001 - reported to the server, which stops.
        await send({"type": "lifespan.startup.failed", "message": str(exc)[:500]})
        raise
    await send({"type": "lifespan.shutdown.complete"})


async def application(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(scope, receive, send)
        return
    path = scope.get("path", "")
    if scope["type"] == "http" and (path == "/mcp" or path == "/mcp/" or path.startswith("/mcp/")):
        await mcp.asgi_app(scope, receive, send)
        return
    await django_app(scope, receive, send)
