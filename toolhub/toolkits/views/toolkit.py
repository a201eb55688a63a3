from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import can_manage_toolkit, can_upload, is_admin
from toolhub.packages import selectors as package_selectors
from toolhub.packages import services as package_services
from toolhub.toolkits import access, selectors, services, starter, tool_tests
from toolhub.toolkits.display import safe_link
from toolhub.toolkits.highlight import highlight_python
from toolhub.toolkits.models import Status, Toolkit, Use
from toolhub.toolkits.notices import revision_warnings
from toolhub.toolkits.source_checks import MAX_SOURCE_BYTES, SourceError, ToolkitSourceInvalid, parse_toolkit_source
from toolhub.toolkits.valves import schema_secrets

PAGE_SIZE = 20


def _read_upload(request: HttpRequest) -> tuple[bytes | str | None, str | None]:
    """The submitted file, else the pasted source; raises ToolkitSourceInvalid for a file
    over the size limit."""
    upload = request.FILES.get("file")
    if upload is not None:
        if upload.size is not None and upload.size > MAX_SOURCE_BYTES:
            # Django has already spooled the upload to disk; the check says how big it
            # really is instead of reading it into memory to find out.
            raise ToolkitSourceInvalid([_too_large(upload.size)])
        return upload.read(), upload.name
    pasted = request.POST.get("source", "")
    return (pasted if pasted.strip() else None), _editor_filename(request.POST.get("filename", ""))


def _editor_filename(value: str) -> str | None:
    """The name of a file the editor read in place of uploading it (the slug may come from
    its stem); only the last path component, and only a plausible Python file name."""
    name = value.replace("\\", "/").rsplit("/", 1)[-1].strip()[:255]
    return name if name.endswith(".py") else None


def _too_large(size: int) -> SourceError:
    message = _("The file is %(size)s bytes (%(kib).1f KiB); the limit is 512 KiB (%(limit)s bytes).") % {
        "size": f"{size:,}", "kib": size / 1024, "limit": f"{MAX_SOURCE_BYTES:,}",
    }
    return SourceError(message=message, code="too_large")


def _source_with_errors(source, errors) -> list[dict]:
    """Source lines with the errors that point at them, for showing errors in place."""
    if isinstance(source, bytes):
        source = source.decode("utf-8", errors="replace")
    if not source or len(source) > MAX_SOURCE_BYTES:
        return []
    by_line: dict[int, list[str]] = {}
    for error in errors:
        if error.line:
            by_line.setdefault(error.line, []).append(error.message)
    if not by_line:
        return []
    # Lines counted the way the checks count them: only CR, LF and CRLF end a line
    # (`str.splitlines` would also cut at form feeds and U+2028, shifting every number).
    lines = source.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [{"number": i, "text": text, "errors": by_line.get(i, [])} for i, text in enumerate(lines, start=1)]


def _check_upload(request: HttpRequest, ctx: dict, submit) -> HttpResponse | None:
    """Read the submitted source and pass it to `submit`; on errors, fill `ctx` so the
    page lists them next to the offending lines, and return None."""
    try:
        source, filename = _read_upload(request)
    except ToolkitSourceInvalid as exc:
        ctx["errors"] = exc.errors
        return None
    if source is None:
        ctx["errors"] = [SourceError(message=_("Choose a file or paste the source of a toolkit."))]
        return None
    try:
        return submit(source=source, filename=filename)
    except ToolkitSourceInvalid as exc:
        ctx["errors"] = exc.errors
        ctx["listing"] = _source_with_errors(source, exc.errors)
        # The text stays in the editor, also when it came as a file, so it can be fixed in
        # place instead of being chosen again.
        text = _as_text(source)
        if text is not None:
            ctx["pasted"] = text
            ctx["filename"] = filename or ""
        ctx["editor_errors"] = _diagnostics(exc.errors)
        return None


def _as_text(source: bytes | str) -> str | None:
    if isinstance(source, str):
        return source
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text.removeprefix("\ufeff")


def _diagnostics(errors: list[SourceError]) -> list[dict]:
    """Errors as the editor marks them in its gutter."""
    return [{"line": e.line, "column": e.column, "message": e.message, "code": e.code} for e in errors]


def _warn(request: HttpRequest, revision) -> None:
    for warning in revision_warnings(revision):
        messages.warning(request, warning["message"])


@login_required
@require_GET
def toolkit_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()[:200]
    toolkits = selectors.toolkit_list(user=request.user, query=query, with_translations=True)
    page = Paginator(toolkits, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "toolkits/list.html", {"page": page, "query": query, "can_upload": can_upload(request.user)})


@login_required
@require_http_methods(["GET", "POST"])
def toolkit_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    if not can_upload(request.user):
        raise PermissionDenied(_("You may not upload toolkits."))
    slug = request.POST.get("slug", "").strip()
    ctx: dict = {"slug": slug, "snippets": starter.SNIPPETS}
    if request.method == "GET" and request.GET.get("template") == "starter":
        ctx["pasted"] = starter.STARTER
    if request.method == "POST":

        def submit(*, source, filename) -> HttpResponse:
            try:
                result = services.toolkit_create(source=source, user=request.user, slug=slug or None, filename=filename)
            except services.SlugTaken as exc:
                if exc.derived:
                    # Offer both ways out: a new revision of the toolkit that has the slug
                    # (for whoever may manage it) or a new toolkit under a free slug.
                    existing = Toolkit.objects.filter(slug=exc.slug).first()
                    ctx["taken"] = {
                        "slug": exc.slug,
                        "free": exc.free,
                        "hidden": exc.hidden,
                        "can_revise": existing is not None and can_manage_toolkit(request.user, existing),
                    }
                raise
            messages.success(request, _("Toolkit uploaded as revision %(n)s.") % {"n": result.revision.number})
            _warn(request, result.revision)
            return redirect(result.toolkit)

        response = _check_upload(request, ctx, submit)
        if response is not None:
            return response
    return render(request, "toolkits/new.html", ctx)


def detail_context(request: HttpRequest, toolkit: Toolkit, tab: str) -> dict:
    revision = toolkit.current_revision
    latest = toolkit.latest_revision()
    return {
        "toolkit": toolkit,
        "revision": revision,
        "latest": latest,
        "tab": tab,
        "can_manage": can_manage_toolkit(request.user, toolkit),
        "is_admin": is_admin(request.user),
    }


@login_required
@require_GET
def toolkit_detail(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = selectors.get_toolkit_for_user(user=request.user, slug=slug)
    ctx = detail_context(request, toolkit, "overview")
    manifest = ctx["revision"].manifest if ctx["revision"] else {}
    ctx["manifest_rows"] = [
        {"key": key, "value": value, "href": safe_link(value) if key.endswith("_url") else None}
        for key, value in manifest.items()
    ]
    ctx["support_url"] = safe_link(manifest.get("funding_url", ""))
    shown = [ctx["revision"]] + ([ctx["latest"]] if ctx["latest"] != ctx["revision"] else [])
    ctx["warnings"] = [warning for revision in shown for warning in revision_warnings(revision)]
    ctx["access"] = access.access_out(toolkit)
    ctx["use_choices"] = Use.choices
    ctx["all_groups"] = Group.objects.order_by("name")[:200] if ctx["can_manage"] else []
    ctx["access_history"] = toolkit.history.filter(kind="access").select_related("by")[:10]
    # Which secret settings every run of the current revision is handed (in plain text).
    current = ctx["revision"]
    ctx["received_secrets"] = {
        "valves": sorted(schema_secrets(current.valves_schema)) if current else [],
        "user_valves": sorted(schema_secrets(current.user_valves_schema)) if current else [],
        # Withheld from a revision no admin uploaded or approved (a rollback to one).
        "withheld": current is not None and not current.entrusted,
    }
    ctx |= readiness_context(request, ctx)
    return render(request, "toolkits/overview.html", ctx)


# The states an upload's Overview keeps polling in: something is still to happen.
UNSETTLED = (Status.UPLOADED, Status.AWAITING_APPROVAL, Status.BUILDING, Status.AWAITING_REVIEW)
# Tools offered as "try …" links when a revision is ready.
TRY_TOOLS = 5


def readiness_context(request: HttpRequest, ctx: dict) -> dict:
    """What the newest revision waits for, or how to try it: the Overview's status block.
    Its owner and admins also see the decisions made on its packages."""
    latest = ctx["latest"]
    if latest is None:
        return {"readiness": None}
    rejected, pending = package_services.request_decisions(revision_id=latest.pk)
    decisions = []
    if ctx["can_manage"]:
        decisions = list(package_selectors.decided_for_revision(revision_id=latest.pk))
    return {"readiness": {
        "revision": latest, "status": latest.status, "polling": latest.status in UNSETTLED,
        "pending": pending, "rejected": rejected, "decisions": decisions,
        "tools": latest.tool_names[:TRY_TOOLS], "more_tools": max(len(latest.tool_names) - TRY_TOOLS, 0),
    }}


@login_required
@require_GET
def toolkit_readiness(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    """The Overview's status block, polled while the newest revision is on its way. When it
    settles, the whole page is reloaded once (HX-Refresh), so its tools and manifest follow."""
    toolkit = selectors.get_toolkit_for_user(user=request.user, slug=slug)
    ctx = detail_context(request, toolkit, "overview")
    ctx |= readiness_context(request, ctx)
    response = render(request, "toolkits/_readiness.html", ctx)
    seen = request.GET.get("seen", "")
    readiness = ctx["readiness"]
    if readiness and seen in UNSETTLED and not readiness["polling"]:
        response["HX-Refresh"] = "true"
    return response


@login_required
@require_GET
def toolkit_source(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = selectors.get_toolkit_for_user(user=request.user, slug=slug)
    ctx = detail_context(request, toolkit, "source")
    shown = ctx["revision"]
    if request.GET.get("revision"):
        shown = toolkit.revisions.filter(number=_int(request.GET["revision"])).first()
        if shown is None:
            raise Http404
    ctx["shown"] = shown
    ctx["can_upload"] = can_upload(request.user)
    ctx["highlighted"] = highlight_python(shown.source) if shown else ""
    return render(request, "toolkits/source.html", ctx)


@login_required
@require_GET
def toolkit_revisions(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = selectors.get_toolkit_for_user(user=request.user, slug=slug)
    ctx = detail_context(request, toolkit, "revisions")
    ctx["revisions"] = list(toolkit.revisions.select_related("uploaded_by", "reviewed_by").defer("source", "build_log", "lock"))
    if ctx["can_manage"]:
        # How each revision's tool tests went before it could become current (one query).
        tests = tool_tests.revision_tests([r.pk for r in ctx["revisions"]])
        for r in ctx["revisions"]:
            r.tests = tests[r.pk]
    return render(request, "toolkits/revisions.html", ctx)


def _int(value: str | None) -> int:
    try:
        return int(value or "")
    except (TypeError, ValueError):
        raise Http404 from None


@login_required
@require_GET
def toolkit_diff(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = selectors.get_toolkit_for_user(user=request.user, slug=slug)
    a = toolkit.revisions.filter(number=_int(request.GET.get("a"))).first()
    b = toolkit.revisions.filter(number=_int(request.GET.get("b"))).first()
    if a is None or b is None:
        raise Http404
    ctx = detail_context(request, toolkit, "revisions")
    ctx.update(a=a, b=b, diff=selectors.revision_diff(a=a, b=b))
    return render(request, "toolkits/diff.html", ctx)


def _revision_form(request: AuthenticatedHttpRequest, slug: str, *, template: str, tab: str, prefill: bool) -> HttpResponse:
    """Upload (a file or pasted text) or edit (the latest revision's text in the editor): both
    add a revision when the source passes the checks."""
    toolkit = selectors.get_toolkit_to_manage(
        user=request.user, slug=slug, refusal=_("Only the toolkit's owner and admins may upload revisions.")
    )
    ctx = detail_context(request, toolkit, tab)
    ctx["snippets"] = starter.SNIPPETS
    if request.method == "POST":

        def submit(*, source, filename) -> HttpResponse:
            result = services.revision_upload(toolkit=toolkit, source=source, user=request.user, filename=filename)
            n = {"n": result.revision.number}
            if result.created:
                messages.success(request, _("Uploaded revision %(n)s.") % n)
                _warn(request, result.revision)
            else:
                messages.info(request, _("The source is identical to revision %(n)s; nothing was added.") % n)
            return redirect("toolkit_revisions", slug=toolkit.slug)

        response = _check_upload(request, ctx, submit)
        if response is not None:
            return response
    elif prefill and ctx["latest"] is not None:
        ctx["pasted"] = ctx["latest"].source
    return render(request, template, ctx)


@login_required
@require_http_methods(["GET", "POST"])
def toolkit_upload(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    return _revision_form(request, slug, template="toolkits/upload.html", tab="revisions", prefill=False)


@login_required
@require_http_methods(["GET", "POST"])
def toolkit_edit(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    return _revision_form(request, slug, template="toolkits/edit.html", tab="edit", prefill=True)


@login_required
@require_POST
def source_check(request: AuthenticatedHttpRequest) -> JsonResponse:
    """The editor's on-demand check: the same static checks as an upload, nothing stored.
    Answers 200 with `{"ok", "errors": [{line, column, message, code}], "tools"}`."""
    if not (can_upload(request.user) or selectors.owns_a_toolkit(user=request.user)):
        return JsonResponse({"detail": _("You may not upload toolkits.")}, status=403)
    try:
        source, filename = _read_upload(request)
        if source is None:
            raise ToolkitSourceInvalid([SourceError(message=_("Choose a file or paste the source of a toolkit."))])
        parsed = parse_toolkit_source(source, filename=filename)
    except ToolkitSourceInvalid as exc:
        n = len(exc.errors)
        summary = ngettext("%(n)s problem; see the marked lines.", "%(n)s problems; see the marked lines.", n) % {"n": n}
        return JsonResponse({"ok": False, "summary": summary, "errors": _diagnostics(exc.errors), "tools": []})
    summary = _("No problems found.")
    return JsonResponse({"ok": True, "summary": summary, "errors": [], "tools": parsed.tool_names})


@login_required
@require_POST
def toolkit_rollback(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = selectors.get_toolkit_to_manage(
        user=request.user, slug=slug, refusal=_("Only the toolkit's owner and admins may roll back.")
    )
    try:
        revision = services.toolkit_rollback(toolkit=toolkit, number=_int(request.POST.get("revision")))
    except ToolkitSourceInvalid as exc:
        messages.error(request, exc.errors[0].message)
    else:
        messages.success(request, _("Revision %(n)s is current again.") % {"n": revision.number})
    return redirect("toolkit_revisions", slug=toolkit.slug)


@login_required
@require_http_methods(["GET", "POST"])
def toolkit_delete(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = selectors.get_toolkit_to_manage(
        user=request.user, slug=slug, refusal=_("Only the toolkit's owner and admins may delete it.")
    )
    if request.method == "POST":
        if request.POST.get("confirm") != toolkit.slug:
            messages.error(request, _("Type the toolkit's slug to confirm."))
            return redirect("toolkit_delete", slug=toolkit.slug)
        services.toolkit_delete(toolkit=toolkit)
        messages.success(request, _("Toolkit %(slug)s deleted.") % {"slug": slug})
        return redirect("toolkit_list")
    return render(request, "toolkits/delete.html", detail_context(request, toolkit, "overview"))
