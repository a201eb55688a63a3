"""The MCP endpoint (Streamable HTTP, official `mcp` SDK): `/mcp/{slug}` serves one toolkit
with its own tool names, `/mcp` every toolkit the caller may use with `{slug}__{tool}` names.

The SDK's Starlette app is wrapped by `asgi_app`, which authenticates the bearer token with
the helper the API uses, answers 401/403/404 before any MCP processing, and hands the caller
and the slug to the handlers in the ASGI scope. Handlers run the Django side (catalogue,
invocations) in worker threads, so one slow tool never holds up another caller.

Questions a tool asks (`__event_call__`) become form elicitations: sent to the client on
handshake-era connections (2025-06-18, 2025-11-25) that declared the capability, returned as
`input_required` on 2026-07-28 connections (the client retries the call with the answer), and
answered with the documented "no answer" value at once for clients without elicitation."""

from __future__ import annotations

import json
import logging
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core import signing
from django.db import DatabaseError, close_old_connections
from django.http.request import split_domain_port, validate_host
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from toolhub import dbretry
from toolhub.accounts.clients import Caller, CallerRefused
from toolhub.runs import services as run_services
from toolhub.runs.models import Invocation, RunStatus, Surface
from toolhub.serving import catalog
from toolhub.serving.auth import caller_from_headers
from toolhub.serving.calls import Declined, NeedsInput, WaitBroken, answer, follow, no_answer, serve_call
from toolhub.serving.limits import RateLimited
from toolhub.toolkits.models import Toolkit

logger = logging.getLogger(__name__)

SCOPE_KEY = "toolhub.serving"
STATE_SALT = "toolhub.serving.mcp.request-state"
INPUT_KEY = "toolhub_question"
MAX_MESSAGE = 2000


def _db(fn, *args, **kwargs):
    """Run Django code in a worker thread of its own and close its connection after."""

    def run():
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(run, thread_sensitive=False)()


def _scope_data(ctx) -> dict:
    request = ctx.request
    data = request.scope.get(SCOPE_KEY) if request is not None else None
    if not data:
        raise MCPError(code=types.INVALID_REQUEST, message="Not reached through ToolHub's MCP endpoint.")
    return data


def _context(ctx) -> tuple[Caller, str | None]:
    data = _scope_data(ctx)
    return data["caller"], data["slug"]


async def list_tools(ctx, params) -> types.ListToolsResult:
    """One toolkit's tools, or a page of every toolkit's (follow `nextCursor` for the rest)."""
    caller, slug = _context(ctx)
    shared = catalog.shared_only(caller)
    following = None
    if slug is not None:
        tools = await _db(catalog.catalog, caller.user, slug, shared=shared)
    else:
        cursor = getattr(params, "cursor", None) if params is not None else None
        try:
            tools, following = await _db(catalog.catalog_page, caller.user, cursor, shared=shared)
        except catalog.BadCursor as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
    return types.ListToolsResult(tools=[
        types.Tool(name=t.name, description=t.description, input_schema=t.parameters) for t in tools
    ], next_cursor=following)


def _text_result(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)


def _source_blocks(events) -> list[Any]:
    """Citations and sources after the result: a resource link where there is a URL."""
    blocks: list[Any] = []
    for event in events:
        if event.type not in ("citation", "source") or not isinstance(event.data, dict):
            continue
        source = event.data.get("source") or {}
        name = str(source.get("name") or "source")[:200]
        url = str(source.get("url") or "")
        documents = event.data.get("document") or []
        if url.startswith(("http://", "https://")):
            blocks.append(types.ResourceLink(name=name, uri=url, description=str(documents[0])[:MAX_MESSAGE] if documents else None))
        else:
            text = f"Source: {name}" + (f"\n{str(documents[0])[:MAX_MESSAGE]}" if documents else "")
            blocks.append(types.TextContent(text=text))
    return blocks


def _outcome_result(outcome) -> types.CallToolResult:
    invocation = outcome.invocation
    if not outcome.ok:
        return _text_result(outcome.error_text(), error=True)
    result = invocation.result
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    content: list[Any] = [types.TextContent(text=text)]
    content.extend(_source_blocks(outcome.events))
    structured = result if isinstance(result, dict) else None
    return types.CallToolResult(content=content, structured_content=structured, is_error=False)


def _question(call: dict) -> tuple[str, dict]:
    """The elicitation message and schema for an `__event_call__`. Form mode must not ask for
    secrets, and Open WebUI's input events carry none: a plain string or a yes/no."""
    data = call.get("data") or {}
    title = str(data.get("title") or "")[:200]
    message = str(data.get("message") or "")[:MAX_MESSAGE]
    text = f"{title}\n{message}".strip() or "The tool asks a question."
    if call.get("type") == "confirmation":
        schema = {"type": "object", "properties": {"confirm": {"type": "boolean", "title": title or "Confirm"}}, "required": ["confirm"]}
    else:
        prop = {"type": "string", "title": title or "Answer"}
        if data.get("placeholder"):
            prop["description"] = str(data["placeholder"])[:200]
        schema = {"type": "object", "properties": {"value": prop}, "required": ["value"]}
    return text, schema


def _value_from(call: dict, result: types.ElicitResult) -> Any:
    if result.action != "accept" or not result.content:
        raise Declined(f"The client's answer was {result.action!r}.")
    if call.get("type") == "confirmation":
        return bool(result.content.get("confirm"))
    value = result.content.get("value")
    if not isinstance(value, str):
        raise Declined("The client's answer held no text.")
    return value


def _supports_elicitation(ctx) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(capabilities is not None and capabilities.elicitation is not None)


def _seal(invocation: Invocation, seen: int, caller: Caller) -> str:
    return signing.dumps({"i": str(invocation.id), "s": seen, "p": list(caller.principal())}, salt=STATE_SALT, compress=True)


def _unseal(state: str, caller: Caller) -> dict:
    try:
        data = signing.loads(state, salt=STATE_SALT, max_age=settings.TOOLHUB_EVENT_CALL_TIMEOUT + 60)
    except signing.BadSignature:
        raise MCPError(code=types.INVALID_PARAMS, message="The request state is invalid or expired.") from None
    if data.get("p") != list(caller.principal()):
        raise MCPError(code=types.INVALID_PARAMS, message="The request state is invalid or expired.")
    return data


def _resume(caller: Caller, state: dict, responses: dict, on_event):
    invocation = Invocation.objects.filter(pk=state["i"], user=caller.user, client=caller.client).select_related("client").first()
    if invocation is None:
        raise MCPError(code=types.INVALID_PARAMS, message="The request state is invalid or expired.")
    response = responses.get(INPUT_KEY)
    call = invocation.pending_call or {}
    if invocation.status == RunStatus.AWAITING_INPUT and call:
        declined = ""
        try:
            if not isinstance(response, types.ElicitResult):
                raise Declined("The client sent no answer to the question.")
            value = _value_from(call, response)
        except LookupError as exc:
            value, declined = no_answer(call), str(exc) or Declined.NO_ANSWER
        answer(invocation, value, declined=declined)
    return invocation


async def call_tool(ctx, params: types.CallToolRequestParams):
    data = _scope_data(ctx)
    # The toolkit of /mcp/{slug} as asgi_app found it for this very request.
    caller, slug, toolkit = data["caller"], data["slug"], data["toolkit"]
    loop_ask: Any
    back_channel = ctx.session.can_send_request
    elicit = _supports_elicitation(ctx)
    progress_count = 0
    meta = ctx.meta or params.meta or {}
    wants_progress = any(meta.get(key) is not None for key in ("progress_token", "progressToken"))

    def on_event(event) -> None:
        nonlocal progress_count
        if event.type != "status" or not isinstance(event.data, dict):
            return
        progress_count += 1
        description = str(event.data.get("description") or "")[:MAX_MESSAGE]
        async_to_sync(ctx.session.report_progress)(progress_count, None, description or None)

    if elicit and back_channel:
        def loop_ask(call: dict) -> Any:
            message, schema = _question(call)
            try:
                result = async_to_sync(ctx.session.elicit_form)(message, schema, ctx.request_id)
            except MCPError as exc:
                # The official SDKs answer with a JSON-RPC error when their elicitation
                # handler fails: that is a decline, and the tool goes on at once.
                raise Declined(f"The client answered the question with an error: {str(exc.message)[:200]}") from None
            return _value_from(call, result)
    elif elicit:
        def loop_ask(call: dict) -> Any:
            raise NeedsInput
    else:
        loop_ask = None

    def run():
        if params.request_state:
            state = _unseal(params.request_state, caller)
            invocation = _resume(caller, state, params.input_responses or {}, on_event)
            return follow(invocation, seen=state["s"], ask=loop_ask, on_event=on_event if wants_progress else None)
        served = catalog.find(caller.user, params.name, slug, shared=catalog.shared_only(caller), toolkit=toolkit)
        if served is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name[:100]}")
        try:
            return serve_call(caller=caller, served=served, arguments=params.arguments or {}, surface=Surface.MCP,
                              ask=loop_ask, on_event=on_event if wants_progress else None)
        except (run_services.InvocationRejected, RateLimited) as exc:
            return exc

    try:
        outcome = await _db(run)
    except WaitBroken as exc:
        # Accepted and perhaps still running: its id, never an error that reads as "call again".
        return _text_result(exc.message(), error=True)
    except DatabaseError as exc:
        # Before the call was accepted: the database's own words stay in the log.
        logger.warning("database unavailable for an MCP tools/call: %s", str(exc).strip())
        raise MCPError(code=types.INTERNAL_ERROR, message=dbretry.UNAVAILABLE) from None
    if isinstance(outcome, RateLimited):
        # The model reads this and may retry; hosts that show errors show it to the person.
        return _text_result(outcome.message, error=True)
    if isinstance(outcome, run_services.InvocationRejected):
        if exc_is_unavailable(outcome):
            raise MCPError(code=types.INTERNAL_ERROR, message=outcome.errors[0][0])
        lines = [f"{field}: {message}" if field else message for message, field in outcome.errors]
        return _text_result("Invalid call: " + "; ".join(lines), error=True)
    if outcome.waiting:
        call = outcome.invocation.pending_call or {}
        message, schema = _question(call)
        request = types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))
        state = await _db(_seal, outcome.invocation, outcome.seen, caller)
        return types.InputRequiredResult(input_requests={INPUT_KEY: request}, request_state=state)
    return _outcome_result(outcome)


def exc_is_unavailable(exc: run_services.InvocationRejected) -> bool:
    return exc.status == 503


server: Server = Server("ToolHub", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
# ToolHub checks the Host and Origin headers itself (below), with its own settings and its own
# error shape, and every request needs a bearer token besides.
_starlette = server.streamable_http_app(
    streamable_http_path="/mcp",
    transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
)


@asynccontextmanager
async def lifespan():
    async with server.session_manager.run():
        yield


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"errors": [{"message": message, "field": None, "line": None}]}, status_code=status, headers=headers)


LOCAL_HOSTS = ["localhost", "127.0.0.1", "[::1]"]


def allowed_hosts() -> list[str]:
    """The Host names /mcp answers to: TOOLHUB_MCP_ALLOWED_HOSTS, else ALLOWED_HOSTS without
    its wildcard, else the local names. A wildcard is never taken from ALLOWED_HOSTS here: with
    it, a page of any site whose name resolves to this server (DNS rebinding) could reach /mcp."""
    configured = settings.TOOLHUB_MCP_ALLOWED_HOSTS or [h for h in settings.ALLOWED_HOSTS if h != "*"]
    return configured or LOCAL_HOSTS


def _host_allowed(headers: Headers) -> bool:
    domain, _port = split_domain_port(headers.get("host", ""))
    return bool(domain) and validate_host(domain, allowed_hosts())


def _origin_allowed(headers: Headers) -> bool:
    """Requests without an Origin (servers, command-line clients) pass; a browser's must be one
    of TOOLHUB_MCP_ALLOWED_ORIGINS (the MCP specification asks servers to check it)."""
    origins = headers.getlist("origin")
    if not origins:
        return True
    return len(origins) == 1 and origins[0].rstrip("/") in settings.TOOLHUB_MCP_ALLOWED_ORIGINS


def _principal(caller: Caller) -> AuthenticatedUser:
    """The caller as the MCP SDK's session manager sees it: it binds each session to the
    principal that opened it and answers 404 to anyone else (a request, an answer to an
    elicitation, a DELETE) who presents that session's id."""
    credential, person = caller.principal()
    return AuthenticatedUser(AccessToken(token="", client_id=credential, subject=person, scopes=[]))


def _admit(headers: Headers, slug: str | None) -> tuple[Caller, Toolkit | None]:
    """The caller, and for /mcp/{slug} the toolkit if the caller may use it (ready or not), in
    one trip to a worker thread and one database connection."""
    caller = caller_from_headers(headers)
    toolkit = None if slug is None else catalog.toolkit_to_serve(caller.user, slug, shared=catalog.shared_only(caller))
    return caller, toolkit


async def asgi_app(scope, receive, send) -> None:
    """`/mcp` and `/mcp/{slug}`: authenticate, check the toolkit, then the SDK's app."""
    path = scope["path"].rstrip("/")
    slug = path[len("/mcp/"):] if path.startswith("/mcp/") else None
    headers = Headers(scope=scope)
    if not _host_allowed(headers):
        await _error(400, "Bad Request (the Host header is not allowed).")(scope, receive, send)
        return
    if not _origin_allowed(headers):
        await _error(403, "This browser origin may not call ToolHub's MCP endpoint (TOOLHUB_MCP_ALLOWED_ORIGINS).")(scope, receive, send)
        return
    if slug is not None and ("/" in slug or not slug or len(slug) > 64):
        await _error(404, "Not found.")(scope, receive, send)
        return
    try:
        caller, toolkit = await _db(_admit, headers, slug)
    except CallerRefused as exc:
        extra = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        await _error(exc.status, exc.message, extra)(scope, receive, send)
        return
    except DatabaseError as exc:
        # Nothing accepted yet: a 503 the client may retry, never the server's bare 500.
        logger.warning("database unavailable on %s: %s", path, str(exc).strip())
        await _error(503, dbretry.UNAVAILABLE, {"Retry-After": "1"})(scope, receive, send)
        return
    if slug is not None and toolkit is None:
        await _error(404, "Not found.")(scope, receive, send)
        return
    inner = dict(scope, path="/mcp", raw_path=b"/mcp")
    inner[SCOPE_KEY] = {"caller": caller, "slug": slug, "toolkit": toolkit}
    inner["user"] = _principal(caller)
    await _starlette(inner, receive, send)
