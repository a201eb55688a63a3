"""The Translations tab of a toolkit (its owner and admins), its JSON import and export, and
the language switcher that remembers a signed-in user's choice."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import check_for_language, ngettext
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.i18n import set_language as django_set_language

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.middleware import remember_language
from toolhub.accounts.roles import can_manage_toolkit
from toolhub.toolkits import display
from toolhub.toolkits.models import Toolkit
from toolhub.toolkits.selectors import get_toolkit_for_user
from toolhub.toolkits.views.toolkit import detail_context

# An import document larger than this is refused unread; a real one is a few kilobytes.
MAX_IMPORT_BYTES = 1024 * 1024


def _get_translatable(request: HttpRequest, slug: str) -> Toolkit:
    """The toolkit, for its owner and admins. Everyone else gets 404, as for the Valves tab:
    the tab is not shown to them, so for them it does not exist."""
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    if not can_manage_toolkit(request.user, toolkit):
        raise Http404
    return toolkit


def _page(request: HttpRequest, toolkit: Toolkit, *, status: int = 200, **extra) -> HttpResponse:
    ctx = detail_context(request, toolkit, "translations")
    revision = ctx["revision"]
    rows = display.translation_table(toolkit=toolkit, revision=revision)
    used = [row for row in rows if row.used]
    columns = [
        # How many keys in use each language still lacks, for the column headers.
        {"code": code, "name": name, "missing": sum(1 for row in used if row.cells[i].missing)}
        for i, (code, name) in enumerate(display.language_names())
    ]
    ctx.update(
        rows=rows,
        columns=columns,
        unused_count=len(rows) - len(used),
        import_text="",
        import_errors=[],
        save_errors=[],
    )
    ctx.update(extra)
    return render(request, "toolkits/translations.html", ctx, status=status)


def _submitted_texts(request: HttpRequest) -> dict[tuple[str, str], str]:
    """The cells a person changed. Each row posts its key (`key-<i>`), its texts
    (`text-<i>-<language>`) and the texts it was shown with (`was-<i>`, JSON): a cell whose
    text is unchanged is left alone, so saving the table never undoes someone else's edit."""
    texts = {}
    codes = display.language_codes()
    index = 0
    while f"key-{index}" in request.POST:
        key = request.POST[f"key-{index}"]
        try:
            was = json.loads(request.POST.get(f"was-{index}", "{}"))
        except ValueError:
            was = {}
        if not isinstance(was, dict):
            was = {}
        for code in codes:
            name = f"text-{index}-{code}"
            if name in request.POST:
                text = request.POST[name].strip()
                if text != str(was.get(code, "")).strip():
                    texts[(code, key)] = text
        index += 1
    return texts


@login_required
@require_http_methods(["GET", "POST"])
def toolkit_translations(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = _get_translatable(request, slug)
    if request.method == "POST":
        try:
            changed = display.translation_save(toolkit=toolkit, texts=_submitted_texts(request))
        except display.TranslationsInvalid as exc:
            return _page(request, toolkit, status=400, save_errors=exc.errors)
        if changed:
            messages.success(
                request,
                ngettext("%(n)s translation saved.", "%(n)s translations saved.", changed) % {"n": changed},
            )
        else:
            messages.info(request, _("Nothing changed."))
        return redirect("toolkit_translations", slug=toolkit.slug)
    return _page(request, toolkit)


@login_required
@require_GET
def toolkit_translations_export(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = _get_translatable(request, slug)
    data = display.translation_export(toolkit=toolkit, revision=toolkit.current_revision)
    response = HttpResponse(
        json.dumps(data, ensure_ascii=False, indent=2) + "\n", content_type="application/json; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{toolkit.slug}-translations.json"'
    return response


@login_required
@require_POST
def toolkit_translations_import(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = _get_translatable(request, slug)
    upload = request.FILES.get("file")
    pasted = request.POST.get("json", "")
    if upload is not None:
        document: bytes | str = upload.read(MAX_IMPORT_BYTES + 1)
    else:
        document = pasted
    if not document or (isinstance(document, str) and not document.strip()):
        errors = [_("Choose a JSON file or paste its contents.")]
        return _page(request, toolkit, status=400, import_errors=errors, import_text=pasted)
    if len(document) > MAX_IMPORT_BYTES:
        errors = [_("The file is larger than %(n)s KiB.") % {"n": MAX_IMPORT_BYTES // 1024}]
        return _page(request, toolkit, status=400, import_errors=errors, import_text="")
    try:
        changed = display.translation_import(toolkit=toolkit, data=document)
    except display.TranslationsInvalid as exc:
        # Nothing was written: the whole document is checked before the first change.
        return _page(request, toolkit, status=400, import_errors=exc.errors, import_text=pasted)
    messages.success(
        request,
        ngettext("Imported: %(n)s translation changed.", "Imported: %(n)s translations changed.", changed)
        % {"n": changed},
    )
    return redirect("toolkit_translations", slug=toolkit.slug)


def set_language(request: HttpRequest) -> HttpResponse:
    """Django's language switcher, which sets the language cookie for this browser; for a
    signed-in user the choice is also saved in their profile, so it follows them."""
    response = django_set_language(request)
    posted = request.POST.get("language", "") if request.method == "POST" else ""
    language = display.normalise_language(posted)
    # The same test Django's view applies before it sets the cookie.
    if language and check_for_language(posted) and request.user.is_authenticated:
        remember_language(user=request.user, language=language)
    return response
