"""Import the JSON that Open WebUI's Tools workspace exports (admins only)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_http_methods

from toolhub.accounts.roles import require_admin
from toolhub.toolkits.bulk import LOADED, MAX_EXPORT_BYTES, REFUSED, ExportInvalid, import_export


@login_required
@require_http_methods(["GET", "POST"])
def toolkit_import(request: HttpRequest) -> HttpResponse:
    require_admin(request.user)
    ctx: dict = {}
    if request.method == "POST":
        upload = request.FILES.get("file")
        if upload is None:
            ctx["problem"] = _("Choose the JSON file that Open WebUI exported.")
        elif (upload.size or 0) > MAX_EXPORT_BYTES:
            ctx["problem"] = _("The file is %(size)s bytes; an export may have at most %(limit)s MiB.") % {
                "size": f"{upload.size:,}", "limit": MAX_EXPORT_BYTES // (1024 * 1024),
            }
        else:
            try:
                imported, verdicts = import_export(upload.read(), user=request.user)
            except ExportInvalid as exc:
                ctx["problem"] = str(exc)
            else:
                ctx["verdicts"] = verdicts
                ctx["imported"] = imported
                if imported:
                    count = sum(v.outcome == LOADED for v in verdicts)
                    ctx["summary"] = ngettext("Imported %(n)s toolkit.", "Imported %(n)s toolkits.", count) % {"n": count}
                else:
                    refused = sum(v.outcome == REFUSED for v in verdicts)
                    ctx["summary"] = ngettext(
                        "Nothing was imported: %(n)s of %(total)s entry was refused.",
                        "Nothing was imported: %(n)s of %(total)s entries were refused.",
                        len(verdicts),
                    ) % {"n": refused, "total": len(verdicts)}
    return render(request, "toolkits/import.html", ctx)
