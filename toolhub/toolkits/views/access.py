"""Who may use a toolkit: set on its Overview by its owner or an admin."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.toolkits import access
from toolhub.toolkits.selectors import get_toolkit_to_manage


@login_required
@require_POST
def toolkit_access(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = get_toolkit_to_manage(
        user=request.user, slug=slug, refusal=_("Only the toolkit's owner and admins may change who can use it.")
    )
    users = request.POST.get("users", "").replace(",", "\n").splitlines()
    try:
        access.toolkit_set_access(
            toolkit=toolkit, use=request.POST.get("use", ""), groups=request.POST.getlist("groups"),
            users=users, by=request.user,
        )
    except access.InvalidAccess as exc:
        messages.error(request, _("Access not changed: %(error)s") % {"error": exc})
    else:
        messages.success(request, _("Access saved."))
    return redirect("toolkit_detail", slug=toolkit.slug)
