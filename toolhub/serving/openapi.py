"""OpenAPI tool servers: `/openapi/{slug}` for one toolkit, `/openapi` for every toolkit the
caller may use. Open WebUI (and Dify's custom tools) read `openapi.json` and make one tool
per operation: name = operationId, description, the JSON request body's schema as the
parameters. Each `POST` runs like an MCP call (toolhub.serving.calls)."""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from toolhub import dbretry
from toolhub.accounts.clients import CallerRefused
from toolhub.runs import services as run_services
from toolhub.runs.models import Surface
from toolhub.serving import catalog
from toolhub.serving.auth import caller_from_headers
from toolhub.serving.calls import WaitBroken, serve_call
from toolhub.serving.limits import RateLimited

MAX_BODY = 1024 * 1024
# The API's words for the same condition (toolhub.api.api).
_DEFS_REF = re.compile(r"^#/\$defs/(.+)$")


def _errors(status: int, message: str, field: str | None = None, headers: dict | None = None) -> JsonResponse:
    return JsonResponse({"errors": [{"message": message, "field": field, "line": None}]}, status=status, headers=headers)


def _cors(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    origin = request.headers.get("Origin")
    if origin and origin in settings.TOOLHUB_CORS_ORIGINS:
        response["Access-Control-Allow-Origin"] = origin
        response["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
        response["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        response["Access-Control-Max-Age"] = "600"
        response["Vary"] = "Origin"
    return response


def _body_schema(parameters: dict, name: str, components: dict) -> dict:
    """The parameters schema, with its local `$defs` moved to the document's components (a
    `#/$defs/...` reference inside an OpenAPI document would point at the document root)."""
    defs = parameters.get("$defs")
    if not isinstance(defs, dict):
        return parameters
    prefix = f"{name}__"

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str) and (m := _DEFS_REF.match(value)):
                    out[key] = f"#/components/schemas/{prefix}{m.group(1)}"
                elif key != "$defs":
                    out[key] = rewrite(value)
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for key, value in defs.items():
        components[f"{prefix}{key}"] = rewrite(value)
    return rewrite(parameters)


# What every call may be answered besides its result (the same error shape as 400 and 500).
REFUSALS = {
    "401": "No bearer token, or one that is not valid.",
    "403": "The caller may not call this tool (or the credential may not act for the person named).",
    "404": "No such tool among the toolkits the caller may use.",
    "429": "Too many calls a minute; Retry-After says when to try again.",
}


def document(*, title: str, description: str, version: str, tools: list[catalog.ServedTool], server: str = "") -> dict:
    """`server`: the absolute URL the tools' paths hang from (a generic OpenAPI client calls
    `{server}/{tool}`; without it, the document's own host root)."""
    components: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for served in tools:
        paths[f"/{served.name}"] = {"post": {
            "operationId": served.name,
            "summary": served.description.split("\n", 1)[0][:200],
            "description": served.description,
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _body_schema(served.parameters, served.name, components)}}},
            "responses": {
                "200": {"description": "The tool's result: a string, or the JSON it returned.",
                        "content": {"application/json": {"schema": {}}}},
                "202": {"description": "Accepted, but the wait for its end broke (the database was unavailable): "
                                       "the invocation's id, status and a message; it may still run.",
                        "content": {"application/json": {"schema": {"type": "object"}}}},
                "400": {"description": "The arguments do not match the schema.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}},
                **{code: {"description": why, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}}
                   for code, why in REFUSALS.items()},
                "500": {"description": "The tool failed; the message is meant for the model.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}},
            },
        }}
    components["Errors"] = {"type": "object", "properties": {"errors": {"type": "array", "items": {
        "type": "object", "properties": {"message": {"type": "string"}, "field": {"type": ["string", "null"]}}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "description": description, "version": version or "1"},
        **({"servers": [{"url": server}]} if server else {}),
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }


def _caller(request: HttpRequest):
    return caller_from_headers(request.headers)


def _refused(request: HttpRequest, exc: CallerRefused) -> HttpResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return _cors(request, _errors(exc.status, exc.message, headers=headers))


@csrf_exempt
def openapi_document(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    if request.method == "OPTIONS":
        return _cors(request, HttpResponse(status=204))
    if request.method != "GET":
        return _cors(request, _errors(405, "Use GET.", headers={"Allow": "GET"}))
    try:
        caller = _caller(request)
    except CallerRefused as exc:
        return _refused(request, exc)
    shared = catalog.shared_only(caller)
    if slug is None:
        try:
            tools = catalog.catalog(caller.user, shared=shared)
        except catalog.TooManyToolkits as exc:
            return _cors(request, _errors(413, str(exc)))
        doc = document(title="ToolHub", description="Every ToolHub toolkit you may use.", version="1", tools=tools,
                       server=request.build_absolute_uri("/openapi"))
    else:
        toolkit = catalog.served_toolkit(caller.user, slug, shared=shared)
        if toolkit is None:
            return _cors(request, _errors(404, "Not found."))
        revision = toolkit.current_revision
        doc = document(title=toolkit.title, description=revision.description if revision else "",
                       version=revision.version if revision else "", tools=catalog.catalog(caller.user, slug, shared=shared),
                       server=request.build_absolute_uri(f"/openapi/{toolkit.slug}"))
    return _cors(request, JsonResponse(doc, json_dumps_params={"ensure_ascii": False}))


@csrf_exempt
def openapi_call(request: HttpRequest, name: str, slug: str | None = None) -> HttpResponse:
    if request.method == "OPTIONS":
        return _cors(request, HttpResponse(status=204))
    if request.method != "POST":
        return _cors(request, _errors(405, "Use POST.", headers={"Allow": "POST"}))
    try:
        caller = _caller(request)
    except CallerRefused as exc:
        return _refused(request, exc)
    shared = catalog.shared_only(caller)
    toolkit = None if slug is None else catalog.toolkit_to_serve(caller.user, slug, shared=shared)
    if slug is not None and toolkit is None:
        return _cors(request, _errors(404, "Not found."))
    served = catalog.find(caller.user, name, slug, shared=shared, toolkit=toolkit)
    if served is None:
        # A toolkit that exists for the caller but is not ready: say so, as the API does.
        if toolkit is not None and name in (toolkit.current_revision.tool_names if toolkit.current_revision else []):
            return _cors(request, _errors(409, run_services.not_ready_reason(toolkit)))
        return _cors(request, _errors(404, "Not found."))
    if len(request.body) > MAX_BODY:
        return _cors(request, _errors(413, f"The request body is over {MAX_BODY} bytes."))
    try:
        arguments = json.loads(request.body or b"{}")
    except ValueError:
        return _cors(request, _errors(400, "The body must be a JSON object of arguments.", "arguments"))
    try:
        outcome = serve_call(caller=caller, served=served, arguments=arguments, surface=Surface.OPENAPI)
    except WaitBroken as exc:
        # Accepted: its id and state, as the API's `wait: true` answers, never a 500 (or an
        # HTML page) that would make the app call, and run, the tool again.
        inv = exc.invocation
        accepted = {"id": str(inv.pk), "status": inv.status, "message": exc.message()}
        return _cors(request, JsonResponse(accepted, status=202, headers={"X-ToolHub-Invocation": str(inv.pk)}))
    except DatabaseError:
        # Before anything was accepted (the database refused the invocation itself).
        dbretry.reconnect()
        return _cors(request, _errors(503, dbretry.UNAVAILABLE, headers={"Retry-After": "1"}))
    except run_services.InvocationRejected as exc:
        body = {"errors": [{"message": m, "field": f, "line": None} for m, f in exc.errors]}
        return _cors(request, JsonResponse(body, status=exc.status))
    except RateLimited as exc:
        return _cors(request, _errors(429, exc.message, headers={"Retry-After": str(exc.retry_after)}))
    headers = {"X-ToolHub-Invocation": str(outcome.invocation.id)}
    if not outcome.ok:
        status = 504 if not outcome.finished else 500
        return _cors(request, _errors(status, outcome.error_text(), headers=headers))
    return _cors(request, JsonResponse(outcome.invocation.result, safe=False, headers=headers,
                                       json_dumps_params={"ensure_ascii": False}))
