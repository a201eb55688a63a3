"""Taking toolkits out: one revision's `.py`, one toolkit or a selection as Open WebUI's export
JSON, and a clone under a new slug. Whoever may see a toolkit may read its source (the Source
tab), so they may download and export it too; a clone is an upload, for those who may upload."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import can_upload
from toolhub.toolkits import export, selectors, services
from toolhub.toolkits.source_checks import ToolkitSourceInvalid
from toolhub.toolkits.views.toolkit import _int


def _attachment(body: str | bytes, *, filename: str, content_type: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
@require_GET
def revision_download(request: AuthenticatedHttpRequest, slug: str, number: int) -> HttpResponse:
    toolkit = selectors.get_toolkit_for_user(user=request.user, slug=slug)
    revision = toolkit.revisions.filter(number=number).first()
    if revision is None:
        raise Http404
    return _attachment(revision.source, filename=export.revision_filename(revision), content_type="text/x-python; charset=utf-8")


def _export_response(toolkits: list, filename: str) -> HttpResponse:
    entries = []
    for toolkit in toolkits:
        revision = export.exported_revision(toolkit)
        if revision is not None:
            entries.append(export.export_entry(toolkit, revision))
    body = json.dumps(entries, ensure_ascii=False, indent=2)
    return _attachment(body, filename=filename, content_type="application/json; charset=utf-8")


@login_required
@require_GET
def toolkit_export(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = selectors.get_toolkit_for_user(user=request.user, slug=slug)
    return _export_response([toolkit], f"{toolkit.slug}-export.json")


@login_required
@require_GET
def toolkits_export(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The toolkits ticked on the list (`?slug=a&slug=b`, at most MAX_EXPORT_ENTRIES): a slug
    the person may not see is 404, as on every page, so the answer reveals nothing."""
    slugs = list(dict.fromkeys(request.GET.getlist("slug")))
    if not slugs:
        messages.error(request, _("Tick the toolkits to export."))
        return redirect("toolkit_list")
    if len(slugs) > export.MAX_EXPORT_ENTRIES:
        return HttpResponse(
            _("At most %(n)s toolkits are exported at once.") % {"n": export.MAX_EXPORT_ENTRIES},
            status=400, content_type="text/plain; charset=utf-8",
        )
    toolkits = list(export.exportable(user=request.user, slugs=slugs).order_by("slug"))
    if len(toolkits) != len(slugs):
        raise Http404
    return _export_response(toolkits, "toolhub-export.json")


@login_required
@require_POST
def toolkit_clone(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = selectors.get_toolkit_for_user(user=request.user, slug=slug)
    if not can_upload(request.user):
        raise PermissionDenied(_("You may not upload toolkits."))
    number = request.POST.get("revision")
    revision = toolkit.revisions.filter(number=_int(number)).first() if number else export.exported_revision(toolkit)
    if revision is None:
        raise Http404
    new_slug = request.POST.get("slug", "").strip()[:100]
    try:
        result = services.toolkit_clone(revision=revision, user=request.user, slug=new_slug or None)
    except ToolkitSourceInvalid as exc:
        messages.error(request, exc.errors[0].message)
        return redirect("toolkit_source", slug=toolkit.slug)
    messages.success(request, _("Cloned %(original)s as %(slug)s.") % {"original": toolkit.slug, "slug": result.toolkit.slug})
    return redirect(result.toolkit)
