"""Network egress: granted per toolkit by an admin, optionally limited to host names."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import require_admin
from toolhub.toolkits import services
from toolhub.toolkits.selectors import get_toolkit_for_user


@login_required
@require_POST
def toolkit_egress(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    require_admin(request.user)
    action = request.POST.get("action")
    if action not in ("grant", "revoke"):
        # The form always sends one of its two buttons; anything else is a malformed request,
        # which changes nothing rather than quietly withdrawing the grant.
        return HttpResponseBadRequest()
    granted = action == "grant"
    hosts = request.POST.get("hosts", "").replace(",", "\n").splitlines()
    if granted and not any(h.strip() for h in hosts) and request.POST.get("any_host") != "on":
        # An empty list means every public host on the internet: one click on the default
        # form must not do that; the admin says so in as many words (the box below the list).
        messages.error(request, _(
            "List the hosts the toolkit may reach, or tick “Any public host” to let it reach every public address."
        ))
        return redirect("toolkit_detail", slug=toolkit.slug)
    try:
        services.toolkit_set_egress(toolkit=toolkit, granted=granted, hosts=hosts, by=request.user)
    except services.InvalidEgressHosts as exc:
        messages.error(request, _("Not a host name or pattern: %(error)s") % {"error": exc})
    else:
        if granted:
            messages.success(request, _("Network egress granted."))
        else:
            messages.success(request, _("Network egress withdrawn: the toolkit has no network."))
    return redirect("toolkit_detail", slug=toolkit.slug)
