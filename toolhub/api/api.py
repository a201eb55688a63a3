"""The HTTP API, version 1 (docs/api.md is the contract). Every error has the shape
{"errors": [{"message", "field", "line"}]}; objects the caller may not see are 404."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, OperationalError
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, URLResolver, re_path
from django.utils import translation
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Path, Query, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser

from toolhub import dbretry, edge, keyset
from toolhub.accounts import clients
from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.models import ClientCredential
from toolhub.accounts.roles import can_manage_toolkit, can_upload, is_admin
from toolhub.agents import selectors as agent_selectors
from toolhub.agents import services as agent_services
from toolhub.agents.models import AgentRun, ModelConnection
from toolhub.api import lists, people
from toolhub.api import schemas as s
from toolhub.api.auth import DEFAULT_AUTH, SERVING_AUTH
from toolhub.api.tool_tests import router as tool_tests_router
from toolhub.packages import selectors as package_selectors
from toolhub.packages import services as package_services
from toolhub.packages.models import Package
from toolhub.runs import services as run_services
from toolhub.runs.models import Invocation
from toolhub.runs.selectors import EVENTS_PAGE_MAX, events_after, get_invocation_for_user
from toolhub.toolkits import access, bulk, lifecycle, schema_forms, selectors, services, tool_tests, valves
from toolhub.toolkits.models import Toolkit
from toolhub.toolkits.source_checks import MAX_SOURCE_BYTES, ToolkitSourceInvalid
from toolhub.vault.secret_fields import MASK, mask_values

logger = logging.getLogger(__name__)
_M = TypeVar("_M", bound=Model)

def _error_body(message: str) -> dict[str, Any]:
    return {"errors": [{"message": message, "field": None, "line": None}]}


def _json_not_allowed(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a view of the API so django-ninja's plain-text 405 keeps the error shape."""

    # `wraps` also copies the view's `csrf_exempt` mark, which django-ninja relies on.
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if isinstance(response, HttpResponseNotAllowed):
            allowed = response["Allow"]
            message = f"Method {request.method} is not allowed here; use {allowed}."
            response = JsonResponse(_error_body(message), status=405, headers={"Allow": allowed})
        return response

    return wrapper


@csrf_exempt
def _unknown_path(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    return JsonResponse(_error_body("No such endpoint."), status=404)


class ToolHubApi(NinjaAPI):
    """django-ninja answers a wrong method with plain text and leaves unknown paths to
    Django's HTML 404 page; the contract allows nothing but the error shape."""

    @property
    def urls(self) -> tuple[list[URLResolver | URLPattern], str, str]:
        patterns, app_name, namespace = super().urls
        for pattern in patterns:
            # Every pattern django-ninja makes is a URLPattern (a view), never a URLResolver.
            pattern.callback = _json_not_allowed(pattern.callback)  # type: ignore[arg-type]
        # Last, so it only catches what no endpoint matched (a newline in the path too).
        patterns.append(re_path(r"^[\s\S]*$", _unknown_path))
        return patterns, app_name, namespace


class EdgeCheckedParser(Parser):
    """The body as toolhub.edge's middleware parsed and checked it (no NUL, no lone
    surrogate, no non-finite number), so one check serves the API and the pages alike.
    A request that did not pass the middleware (none should) gets the same check here."""

    def parse_body(self, request: HttpRequest) -> Any:
        document = getattr(request, edge.PARSED_JSON, edge.MISSING)
        if document is edge.MISSING:
            document = edge.loads_strict(request.body)
            edge.check_json(document)
        return document


api = ToolHubApi(
    title="ToolHub API",
    version="1",
    description="Manage toolkits, approve packages, edit valves and invoke tools.",
    auth=DEFAULT_AUTH,
    urls_namespace="api",
    openapi_url="/openapi.json",
    parser=EdgeCheckedParser(),
)
api.add_router("/", lists.router)

api.add_router("", "toolhub.api.usage.router")  # GET /usage (docs/usage.md)

ERRORS = {400: s.ErrorOut, 401: s.ErrorOut, 403: s.ErrorOut, 404: s.ErrorOut, 409: s.ErrorOut, 413: s.ErrorOut, 429: s.ErrorOut, 503: s.ErrorOut}


class ApiError(Exception):
    def __init__(self, status: int, errors: list[dict[str, Any]], headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.errors = errors
        self.headers = headers or {}


def _error(status: int, message: str, field: str | None = None, line: int | None = None) -> ApiError:
    return ApiError(status, [{"message": message, "field": field, "line": line}])


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    response = api.create_response(request, {"errors": exc.errors}, status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    return response


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = []
    for err in exc.errors:
        # (where, name, ...) for a parameter, ("body", "payload", field, ...) for the body: only
        # the place goes, so a field named `query` keeps its name.
        loc = [str(p) for p in err.get("loc", [])]
        loc = loc[2:] if loc[:1] == ["body"] else loc[1:]
        errors.append({"message": err.get("msg", "invalid"), "field": ".".join(loc) or None, "line": None})
    return api.create_response(request, {"errors": errors}, status=400)


@api.exception_handler(AuthenticationError)
def _auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    # A bearer token that was sent and refused is not the same mistake as sending none.
    sent = request.headers.get("Authorization", "").lower().startswith("bearer ")
    message = clients.INVALID_TOKEN if sent else clients.NO_TOKEN
    return api.create_response(request, {"errors": [{"message": message, "field": None, "line": None}]}, status=401)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return api.create_response(request, {"errors": [{"message": "Not found.", "field": None, "line": None}]}, status=404)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    message, field, line = str(exc), None, None
    if isinstance(exc.__cause__, edge.BadInput):
        # django-ninja wraps every parser error in "Cannot parse request body".
        cause = exc.__cause__
        message, field, line = edge.refusal(cause), cause.field, cause.line
    return api.create_response(request, {"errors": [{"message": message, "field": field, "line": line}]}, status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    message = f"The request body is over {limit} bytes; a toolkit's source may be at most {MAX_SOURCE_BYTES} bytes."
    return api.create_response(request, _error_body(message), status=413)


@api.exception_handler(lifecycle.QueueUnavailable)
def _not_queued(request: HttpRequest, exc: lifecycle.QueueUnavailable) -> HttpResponse:
    # The change was committed; the revision is failed so that Retry works at once.
    return api.create_response(request, _error_body(str(exc)), status=503)


@api.exception_handler(OperationalError)
def _database_unavailable(request: HttpRequest, exc: OperationalError) -> HttpResponse:
    # The database refused or lost the connection (restarting, out of connection slots):
    # the server's condition, not the caller's, and a retry later can succeed.
    logger.warning("database unavailable on %s %s: %s", request.method, request.path, str(exc).strip())
    dbretry.reconnect()
    response = api.create_response(request, _error_body(dbretry.UNAVAILABLE), status=503)
    response["Retry-After"] = "1"
    return response


@api.exception_handler(Exception)
def _unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    # Never a traceback or HTML in an API response.
    logger.exception("unhandled API error on %s %s", request.method, request.path)
    return api.create_response(request, {"errors": [{"message": "Internal error.", "field": None, "line": None}]}, status=500)


def _source_errors(exc: ToolkitSourceInvalid) -> ApiError:
    status = 409 if isinstance(exc, services.SlugTaken) else 400
    return ApiError(status, [{"message": e.message, "field": e.field, "line": e.line} for e in exc.errors])


def _check_size(source: str) -> None:
    size = len(source.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        raise _error(413, f"The source is {size} bytes; the limit is {MAX_SOURCE_BYTES} bytes (512 KiB).", "source")


def _language(request: HttpRequest) -> str:
    lang = request.GET.get("lang")
    if lang:
        return lang.lower()[:10]
    return translation.get_language_from_request(request)


def _toolkit(request: AuthenticatedHttpRequest, slug: str) -> Toolkit:
    return selectors.get_toolkit_for_user(user=request.user, slug=slug)


def _toolkit_out(request: AuthenticatedHttpRequest, toolkit: Toolkit) -> s.ToolkitOut:
    """The toolkit's answer, its display strings in the caller's language."""
    return s.ToolkitOut.from_orm(toolkit, context={"language": _language(request)})


def _manageable(request: AuthenticatedHttpRequest, slug: str) -> Toolkit:
    toolkit = _toolkit(request, slug)
    if not can_manage_toolkit(request.user, toolkit):
        raise _error(403, "Only the toolkit's owner and admins may do this.")
    return toolkit


# TOOLKITS
# ------------------------------------------------------------------------------


@api.get("/toolkits", response={200: lists.ToolkitPage, **ERRORS}, tags=["toolkits"], auth=SERVING_AUTH)
def list_toolkits(
    request: AuthenticatedHttpRequest, q: str = "", cursor: str = Query("", max_length=keyset.MAX_CURSOR_CHARS),
    limit: int = Query(lists.TOOLKITS_LIMIT, ge=1, le=lists.TOOLKITS_LIMIT_MAX),
) -> dict[str, Any]:
    """A page of the toolkits the caller may use, by title; `next_cursor` is the next page's `cursor`."""
    return lists.toolkits_page(user=request.user, query=q[:200], cursor=cursor, limit=limit)


@api.post("/toolkits", response={201: s.ToolkitOut, **ERRORS}, tags=["toolkits"])
def create_toolkit(request: AuthenticatedHttpRequest, payload: s.ToolkitIn) -> Status[s.ToolkitOut]:
    if not can_upload(request.user):
        raise _error(403, "Only toolkit authors and admins may upload toolkits.")
    _check_size(payload.source)
    try:
        result = services.toolkit_create(source=payload.source, user=request.user, slug=payload.slug)
    except ToolkitSourceInvalid as exc:
        raise _source_errors(exc) from None
    return Status(201, _toolkit_out(request, result.toolkit))


@api.post(
    "/imports/openwebui", response={**ERRORS, 200: s.ImportOut, 400: s.ImportRefusedOut}, tags=["toolkits"],
    openapi_extra={"requestBody": s.EXPORT_BODY},
)
def import_openwebui(request: AuthenticatedHttpRequest) -> dict[str, Any] | Status[dict[str, Any]]:
    """The JSON that Open WebUI's Tools workspace exports, as the request body (admins)."""
    _admin(request)
    try:
        imported, verdicts = bulk.import_export(request.body, user=request.user)
    except bulk.ExportInvalid as exc:
        raise _error(400, str(exc)) from None
    body: dict = {"imported": imported, "entries": [verdict.as_dict() for verdict in verdicts]}
    if imported:
        return body
    body["errors"] = [
        {"message": v.error, "field": f"entries[{number}]", "line": v.line}
        for number, v in enumerate(verdicts, start=1)
        if v.outcome == bulk.REFUSED
    ]
    return Status(400, body)


@api.get("/toolkits/{slug}", response={200: s.ToolkitOut, **ERRORS}, tags=["toolkits"], auth=SERVING_AUTH)
def get_toolkit(request: AuthenticatedHttpRequest, slug: str) -> s.ToolkitOut:
    return _toolkit_out(request, _toolkit(request, slug))


@api.put("/toolkits/{slug}", response={200: s.ToolkitOut, **ERRORS}, tags=["toolkits"])
def update_toolkit(request: AuthenticatedHttpRequest, slug: str, payload: s.SourceIn) -> s.ToolkitOut:
    toolkit = _manageable(request, slug)
    _check_size(payload.source)
    try:
        services.revision_upload(toolkit=toolkit, source=payload.source, user=request.user)
    except ToolkitSourceInvalid as exc:
        raise _source_errors(exc) from None
    return _toolkit_out(request, _toolkit(request, slug))


@api.post("/toolkits/{slug}/rollback", response={200: s.ToolkitOut, **ERRORS}, tags=["toolkits"])
def rollback_toolkit(request: AuthenticatedHttpRequest, slug: str, payload: s.RollbackIn) -> s.ToolkitOut:
    toolkit = _manageable(request, slug)
    try:
        services.toolkit_rollback(toolkit=toolkit, number=payload.revision)
    except ToolkitSourceInvalid as exc:
        status = 409 if isinstance(exc, (services.RevisionAwaitingReview, services.RevisionRefused)) else 404
        raise _error(status, exc.errors[0].message, "revision") from None
    return _toolkit_out(request, _toolkit(request, slug))


@api.delete("/toolkits/{slug}", response={204: None, **ERRORS}, tags=["toolkits"])
def delete_toolkit(request: AuthenticatedHttpRequest, slug: str) -> Status[None]:
    services.toolkit_delete(toolkit=_manageable(request, slug))
    return Status(204, None)


@api.put("/toolkits/{slug}/access", response={200: s.ToolkitOut, **ERRORS}, tags=["toolkits"])
def put_access(request: AuthenticatedHttpRequest, slug: str, payload: s.AccessIn) -> s.ToolkitOut:
    toolkit = _manageable(request, slug)
    try:
        access.toolkit_set_access(toolkit=toolkit, use=payload.use, groups=payload.groups, users=payload.users, by=request.user)
    except access.InvalidAccess as exc:
        raise _error(400, str(exc), exc.field) from None
    # Read again as the caller: an owner keeps access to their own toolkit whatever is set.
    return _toolkit_out(request, _toolkit(request, slug))


# VALVES
# ------------------------------------------------------------------------------


def _valves_response(schema: dict[str, Any] | None, stored: dict[str, Any]) -> dict[str, Any]:
    secrets = valves.schema_secrets(schema)
    masked, is_set = mask_values(stored, secrets)
    return {"values": masked, "secrets": is_set}


def _valves_put(
    request: AuthenticatedHttpRequest, toolkit: Toolkit, schema: dict[str, Any] | None, values: dict[str, Any],
    owner: User | None, shown_revision: int | None = None,
) -> dict[str, Any]:
    if not schema:
        raise _error(409, "This toolkit has no settings of this kind (or is not ready yet).")
    merged, errors = valves.values_save(
        toolkit=toolkit, schema=schema, submitted=values, user=owner, by=request.user, shown_revision=shown_revision
    )
    if shown_revision is not None and errors and not merged:
        # Nothing was looked at: the revision the values were meant for is no longer current.
        raise _error(409, errors[schema_forms.ALL_ERRORS][0], "revision")
    if errors:
        # Per-field messages come from the schema; they never echo a submitted value.
        raise ApiError(400, [{"message": m, "field": None if f == "__all__" else f, "line": None} for f, ms in errors.items() for m in ms])
    return _valves_response(schema, merged)


def _schema(toolkit: Toolkit, attr: str) -> dict[str, Any] | None:
    revision = toolkit.current_revision
    return getattr(revision, attr) if revision else None


@api.get("/toolkits/{slug}/valves", response={200: s.ValvesOut, **ERRORS}, tags=["valves"])
def get_valves(request: AuthenticatedHttpRequest, slug: str) -> dict[str, Any]:
    toolkit = _toolkit(request, slug)
    if not is_admin(request.user):
        raise Http404
    return _valves_response(_schema(toolkit, "valves_schema"), valves.load_values(toolkit=toolkit))


@api.put("/toolkits/{slug}/valves", response={200: s.ValvesOut, **ERRORS}, tags=["valves"])
def put_valves(request: AuthenticatedHttpRequest, slug: str, payload: s.ValvesIn) -> dict[str, Any]:
    toolkit = _toolkit(request, slug)
    if not is_admin(request.user):
        raise Http404
    return _valves_put(request, toolkit, _schema(toolkit, "valves_schema"), payload.values, None, payload.revision)


@api.get("/toolkits/{slug}/user-valves", response={200: s.ValvesOut, **ERRORS}, tags=["valves"])
def get_user_valves(request: AuthenticatedHttpRequest, slug: str) -> dict[str, Any]:
    toolkit = _toolkit(request, slug)
    return _valves_response(_schema(toolkit, "user_valves_schema"), valves.load_values(toolkit=toolkit, user=request.user))


@api.put("/toolkits/{slug}/user-valves", response={200: s.ValvesOut, **ERRORS}, tags=["valves"])
def put_user_valves(request: AuthenticatedHttpRequest, slug: str, payload: s.ValvesIn) -> dict[str, Any]:
    toolkit = _toolkit(request, slug)
    return _valves_put(request, toolkit, _schema(toolkit, "user_valves_schema"), payload.values, request.user)


# PACKAGES
# ------------------------------------------------------------------------------


def _admin(request: AuthenticatedHttpRequest) -> None:
    if not is_admin(request.user):
        raise Http404


PACKAGES_PAGE = 100
PACKAGES_PAGE_MAX = 500
# The revisions listed per package; `requested_count` says how many there are.
REQUESTED_BY_MAX = 50
PACKAGE_NAME_MAX = 200


def _page(qs: QuerySet[_M], limit: int, offset: int) -> dict[str, Any]:
    """`{"items", "count", "next_offset"}` of one page of a queryset (the items as read: the
    response's schema builds each one)."""
    count = qs.count()
    following = offset + limit if offset + limit < count else None
    return {"items": list(qs[offset:offset + limit]), "count": count, "next_offset": following}


def _package(package: Package) -> Package:
    """The package as PackageOut reads it (annotated with its requests)."""
    return package_selectors.packages_with_requests(requests_shown=REQUESTED_BY_MAX).get(pk=package.pk)


@api.get("/packages", response={200: s.PackageList, **ERRORS}, tags=["packages"])
def list_packages(
    request: AuthenticatedHttpRequest,
    status: s.PackageStatus | None = None,
    limit: int = Query(PACKAGES_PAGE, ge=1, le=PACKAGES_PAGE_MAX),
    offset: int = Query(0, ge=0, le=2**31 - 1),
) -> dict[str, Any]:
    _admin(request)
    qs = package_selectors.packages_with_requests(status=status or None, requests_shown=REQUESTED_BY_MAX)
    return _page(qs, limit, offset)


@api.post("/packages/{name}/approve", response={200: s.PackageOut, **ERRORS}, tags=["packages"])
def approve_package(
    request: AuthenticatedHttpRequest, payload: s.ApproveIn, name: str = Path(..., max_length=PACKAGE_NAME_MAX)
) -> Package:
    _admin(request)
    try:
        package = lifecycle.package_approve(
            name=name, user=request.user, constraint=payload.constraint or "", unknown_confirmed=payload.approve_unknown,
            source_build=payload.source_build,
        )
    except package_services.InvalidDecision as exc:
        raise _error(400, str(exc), exc.field) from None
    return _package(package)


@api.post("/packages/{name}/reject", response={200: s.PackageOut, **ERRORS}, tags=["packages"])
def reject_package(
    request: AuthenticatedHttpRequest, payload: s.RejectIn, name: str = Path(..., max_length=PACKAGE_NAME_MAX)
) -> Package:
    _admin(request)
    try:
        package = lifecycle.package_reject(name=name, user=request.user, reason=payload.reason)
    except package_services.InvalidDecision as exc:
        raise _error(400, str(exc), exc.field) from None
    return _package(package)


# REVIEWS (admins)
# ------------------------------------------------------------------------------

REVIEWS_PAGE = 100


@api.get("/reviews", response={200: s.ReviewList, **ERRORS}, tags=["reviews"])
def list_reviews(
    request: AuthenticatedHttpRequest,
    limit: int = Query(REVIEWS_PAGE, ge=1, le=REVIEWS_PAGE),
    offset: int = Query(0, ge=0, le=2**31 - 1),
) -> dict[str, Any]:
    _admin(request)
    qs = selectors.revisions_awaiting_review().only(
        "number", "version", "sha256", "created_at", "status_changed_at", "status_detail",
        "toolkit__slug", "toolkit__current_revision__number", "uploaded_by__username",
    )
    return _page(qs, limit, offset)


def _review(
    request: AuthenticatedHttpRequest, slug: str, number: int, approve: bool, reason: str = ""
) -> s.ToolkitOut:
    _admin(request)
    revision = get_object_or_404(selectors.get_toolkit_for_user(user=request.user, slug=slug).revisions, number=number)
    if approve and not reason and tool_tests.failed_gate_runs([revision.pk]):
        raise _error(400, _("Its tests failed: give a reason for approving it anyway; it is recorded."), "reason")
    if lifecycle.review_decide(revision_id=revision.pk, user=request.user, approve=approve, reason=reason) is None:
        raise _error(409, _("That revision no longer awaits review."))
    return _toolkit_out(request, _toolkit(request, slug))


REVISION_NUMBER = Path(..., ge=1, le=2**31 - 1)


@api.post("/toolkits/{slug}/revisions/{revision}/approve", response={200: s.ToolkitOut, **ERRORS}, tags=["reviews"])
def approve_revision(
    request: AuthenticatedHttpRequest, payload: s.ReviewApproveIn, slug: str, revision: int = REVISION_NUMBER
) -> s.ToolkitOut:
    return _review(request, slug, revision, approve=True, reason=payload.reason.strip())


@api.post("/toolkits/{slug}/revisions/{revision}/reject", response={200: s.ToolkitOut, **ERRORS}, tags=["reviews"])
def reject_revision(
    request: AuthenticatedHttpRequest, payload: s.ReviewRejectIn, slug: str, revision: int = REVISION_NUMBER
) -> s.ToolkitOut:
    return _review(request, slug, revision, approve=False, reason=payload.reason.strip())


# CLIENT CREDENTIALS (admins)
# ------------------------------------------------------------------------------


@api.get("/clients", response={200: s.ClientList, **ERRORS}, tags=["clients"])
def list_clients(request: AuthenticatedHttpRequest) -> dict[str, Any]:
    _admin(request)
    return {"items": list(ClientCredential.objects.active())}


@api.post("/clients", response={201: s.ClientCreatedOut, **ERRORS}, tags=["clients"])
def create_client(request: AuthenticatedHttpRequest, payload: s.ClientIn) -> Status[s.ClientCreatedOut]:
    _admin(request)
    try:
        client, raw = clients.client_create(
            name=payload.name, acts_for_users=payload.acts_for_users, user_header=payload.user_header,
            create_users=payload.create_users, by=request.user, calls_per_minute=payload.calls_per_minute,
            may_act_for_admins=payload.may_act_for_admins,
            user_calls_per_minute=payload.user_calls_per_minute,
        )
    except clients.InvalidClient as exc:
        raise _error(409 if isinstance(exc, clients.ClientNameTaken) else 400, str(exc), exc.field) from None
    # The token is shown this once: it is stored only as its digest.
    return Status(201, s.ClientCreatedOut(**s.ClientOut.model_validate(client).model_dump(), token=raw))


@api.delete("/clients/{client_id}", response={204: None, **ERRORS}, tags=["clients"])
def revoke_client(request: AuthenticatedHttpRequest, client_id: int) -> Status[None]:
    _admin(request)
    client = ClientCredential.objects.active().filter(pk=client_id).first()
    if client is None:
        raise Http404
    clients.client_revoke(client=client)
    return Status(204, None)


# INVOCATIONS
# ------------------------------------------------------------------------------


@api.post(
    "/toolkits/{slug}/tools/{tool}/invoke", response={200: s.InvocationOut, 202: s.QueuedOut, **ERRORS}, tags=["invocations"],
    auth=SERVING_AUTH,
)
def invoke(request: AuthenticatedHttpRequest, slug: str, tool: str, payload: s.InvokeIn) -> Status[s.InvocationOut | dict[str, Any]]:
    toolkit = selectors.get_toolkit_to_call(user=request.user, slug=slug)
    try:
        invocation = run_services.invocation_create(
            toolkit=toolkit, tool=tool, arguments=payload.arguments, user=request.user,
            messages=payload.messages, files=payload.files, client=getattr(request, "toolhub_client", None),
            listen=payload.wait,
        )
    except run_services.InvocationRejected as exc:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        raise ApiError(exc.status, [{"message": m, "field": f, "line": None} for m, f in exc.errors], headers) from None
    if not payload.wait:
        return Status(202, {"id": str(invocation.id), "status": invocation.status})
    try:
        # Built here, not by django-ninja after the return: reading its events is part of the wait.
        return Status(200, s.InvocationOut.from_orm(run_services.wait_for(invocation)))
    except DatabaseError:
        # Accepted and queued: the caller gets its id to poll, never a 500 that would make it
        # call (and run) the tool again.
        logger.warning("invocation %s: could not wait for it (database unavailable)", invocation.id, exc_info=True)
        dbretry.reconnect()
        return Status(202, {"id": str(invocation.id), "status": invocation.status})


def _invocation(request: AuthenticatedHttpRequest, invocation_id: str) -> Invocation:
    # A client credential follows only the invocations it started for the same person.
    return get_invocation_for_user(
        user=request.user, invocation_id=invocation_id, client=getattr(request, "toolhub_client", None)
    )


@api.get("/invocations/{invocation_id}", response={200: s.InvocationOut, **ERRORS}, tags=["invocations"], auth=SERVING_AUTH)
def get_invocation(request: AuthenticatedHttpRequest, invocation_id: str) -> Invocation:
    return _invocation(request, invocation_id)


@api.get("/invocations/{invocation_id}/events", response={200: s.EventPage, **ERRORS}, tags=["invocations"], auth=SERVING_AUTH)
def list_events(
    request: AuthenticatedHttpRequest, invocation_id: str,
    after: int = Query(0, ge=0, le=2**31 - 1), limit: int = Query(EVENTS_PAGE_MAX, ge=1, le=EVENTS_PAGE_MAX),
) -> dict[str, Any]:
    """A run's events in order, a page at a time: pass the answer's `next_after` as `after` for
    the next page (null once there is none). However long the run, one page is one query."""
    events, next_after = events_after(_invocation(request, invocation_id), after=after, limit=limit)
    return {"items": events, "next_after": next_after}


@api.post("/invocations/{invocation_id}/respond", response={200: s.InvocationOut, **ERRORS}, tags=["invocations"], auth=SERVING_AUTH)
def respond(request: AuthenticatedHttpRequest, invocation_id: str, payload: s.RespondIn) -> Invocation:
    invocation = _invocation(request, invocation_id)
    if invocation.user_id != request.user.pk:
        raise Http404
    try:
        run_services.invocation_respond(invocation=invocation, value=payload.value)
    except run_services.InvocationRejected as exc:
        raise ApiError(exc.status, [{"message": m, "field": f, "line": None} for m, f in exc.errors]) from None
    invocation.refresh_from_db()
    return invocation


@api.post("/invocations/{invocation_id}/cancel", response={200: s.InvocationOut, **ERRORS}, tags=["invocations"], auth=SERVING_AUTH)
def cancel(request: AuthenticatedHttpRequest, invocation_id: str) -> Invocation:
    """The invoker and admins end a run: it fails with "Cancelled by <user>." and its sandbox
    is stopped. 409 when it has already finished, 403 for someone else's run."""
    invocation = _invocation(request, invocation_id)
    try:
        invocation = run_services.invocation_cancel(invocation=invocation, by=request.user)
    except run_services.InvocationRejected as exc:
        raise ApiError(exc.status, [{"message": m, "field": f, "line": None} for m, f in exc.errors]) from None
    return invocation


# MODEL CONNECTIONS (admins)
# ------------------------------------------------------------------------------


def _connection_errors(exc: agent_services.ConnectionInvalid) -> ApiError:
    return ApiError(400, [{"message": m, "field": f, "line": None} for f, m in exc.errors])


@api.get("/model-connections", response={200: s.ModelConnectionList, **ERRORS}, tags=["agents"])
def list_model_connections(request: AuthenticatedHttpRequest) -> dict[str, Any]:
    _admin(request)
    connections = ModelConnection.objects.prefetch_related("groups").order_by("name")
    return {"items": list(connections)}


@api.post("/model-connections", response={201: s.ModelConnectionOut, **ERRORS}, tags=["agents"])
def create_model_connection(request: AuthenticatedHttpRequest, payload: s.ModelConnectionIn) -> Status[ModelConnection]:
    _admin(request)
    data = agent_services.ConnectionInput(
        name=payload.name, base_url=payload.base_url, models=payload.models, timeout_seconds=payload.timeout_seconds,
        use=payload.use, groups=payload.groups, api_key=payload.api_key, headers=payload.headers,
    )
    try:
        connection = agent_services.connection_create(data=data, by=request.user)
    except agent_services.ConnectionInvalid as exc:
        raise _connection_errors(exc) from None
    return Status(201, connection)


@api.post("/model-connections/{connection_id}/test", response={200: s.ModelListOut, **ERRORS}, tags=["agents"])
def test_model_connection(request: AuthenticatedHttpRequest, connection_id: int) -> dict[str, Any]:
    _admin(request)
    connection = ModelConnection.objects.filter(pk=connection_id).first()
    if connection is None:
        raise Http404
    try:
        return {"models": agent_services.connection_list_models(connection=connection)}
    except agent_services.ModelError as exc:
        raise _error(503, str(exc)) from None


# AGENT RUNS
# ------------------------------------------------------------------------------


@api.post("/agent-runs", response={202: s.QueuedOut, **ERRORS}, tags=["agents"])
def create_agent_run(request: AuthenticatedHttpRequest, payload: s.AgentRunIn) -> Status[dict[str, Any]]:
    try:
        run = agent_services.agent_run_create(
            user=request.user, connection=payload.connection, model=payload.model, strategy=payload.strategy,
            tools=[t.dict() for t in payload.tools], query=payload.query, max_iterations=payload.max_iterations,
        )
    except agent_services.AgentRunRejected as exc:
        raise ApiError(exc.status, [{"message": m, "field": f, "line": None} for m, f in exc.errors]) from None
    return Status(202, {"id": str(run.id), "status": run.status})


@api.get("/agent-runs/{run_id}", response={200: s.AgentRunOut, **ERRORS}, tags=["agents"])
def get_agent_run(request: AuthenticatedHttpRequest, run_id: str) -> AgentRun:
    return agent_selectors.get_agent_run_for_user(user=request.user, run_id=run_id)


api.add_router("/", people.router)  # /users and /groups (admins)
# Saved tool tests and their runs (docs/tool-tests.md).
api.add_router("", tool_tests_router)

__all__ = ["api", "MASK"]
