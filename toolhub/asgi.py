"""ToolHub as an ASGI application: Django for everything, except `/mcp` and `/mcp/{slug}`,
which the official MCP SDK's Streamable HTTP app serves (toolhub.serving.mcp).

Serve it with uvicorn (`make run` does: `uvicorn toolhub.asgi:application`)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings")
# The web server keeps its database connections in a pool (see TOOLHUB_DB_POOL in settings).
os.environ.setdefault("TOOLHUB_DB_POOL", "1")

django_app = get_asgi_application()

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
