from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from toolhub.accounts.models import ApiToken


@never_cache  # The response to the POST holds a secret; no cache may keep it.
@login_required
@require_http_methods(["GET", "POST"])
def api_tokens(request: HttpRequest) -> HttpResponse:
    new_token = None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()[:100] or _("Unnamed token")
        _token, new_token = ApiToken.issue(user=request.user, name=name)
    tokens = ApiToken.objects.filter(user=request.user)
    # The raw token is rendered once, in the response to the POST that created it; it is
    # never stored and cannot be shown again.
    return render(request, "accounts/tokens.html", {"tokens": tokens, "new_token": new_token})


@login_required
@require_POST
def api_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = ApiToken.objects.filter(pk=token_id, user=request.user).first()
    if token is None:
        raise Http404
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        messages.success(request, _("Token %(name)s revoked.") % {"name": token.name})
    return redirect("api_tokens")
