from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from toolhub.accounts import clients
from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.models import DEFAULT_USER_HEADER, ApiToken, ClientCredential
from toolhub.accounts.roles import require_admin


@never_cache  # The response to the POST holds a secret; no cache may keep it.
@login_required
@require_http_methods(["GET", "POST"])
def api_tokens(request: AuthenticatedHttpRequest) -> HttpResponse:
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
def api_token_revoke(request: AuthenticatedHttpRequest, token_id: int) -> HttpResponse:
    token = ApiToken.objects.filter(pk=token_id, user=request.user).first()
    if token is None:
        raise Http404
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        messages.success(request, _("Token %(name)s revoked.") % {"name": token.name})
    return redirect("api_tokens")



def _optional_int(value: str, field: str) -> int | None:
    value = value.strip()
    if not value:
        return None
    if not value.isdigit() or len(value) > 7:
        raise clients.InvalidClient(f"{field} must be a whole number from 0 to {clients.MAX_RATE}.", field)
    return int(value)


@never_cache  # The response to the POST holds a secret; no cache may keep it.
@login_required
@require_http_methods(["GET", "POST"])
def client_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The admins' page of client credentials: one per LLM application."""
    require_admin(request.user)
    new_token = credential = None
    error = None
    if request.method == "POST":
        try:
            credential, new_token = clients.client_create(
                name=request.POST.get("name", ""), acts_for_users=request.POST.get("acts_for_users") == "on",
                user_header=request.POST.get("user_header", "").strip()[:100] or DEFAULT_USER_HEADER,
                create_users=request.POST.get("create_users") == "on", by=request.user,
                may_act_for_admins=request.POST.get("may_act_for_admins") == "on",
                calls_per_minute=_optional_int(request.POST.get("calls_per_minute", ""), "calls_per_minute"),
                user_calls_per_minute=_optional_int(request.POST.get("user_calls_per_minute", ""), "user_calls_per_minute"),
            )
        except clients.InvalidClient as exc:
            error = str(exc)
    credentials = ClientCredential.objects.select_related("created_by")
    return render(request, "accounts/clients.html", {
        "credentials": credentials, "new_token": new_token, "new_credential": credential, "error": error, "default_header": DEFAULT_USER_HEADER,
        "client_scope": clients.CLIENT_SCOPE,
        "default_client_rate": settings.TOOLHUB_CLIENT_CALLS_PER_MINUTE, "default_user_rate": settings.TOOLHUB_USER_CALLS_PER_MINUTE,
    }, status=400 if error else 200)


@login_required
@require_POST
def client_revoke(request: AuthenticatedHttpRequest, client_id: int) -> HttpResponse:
    require_admin(request.user)
    credential = ClientCredential.objects.filter(pk=client_id).first()
    if credential is None:
        raise Http404
    if credential.is_active:
        clients.client_revoke(client=credential)
        messages.success(request, _("Client %(name)s revoked.") % {"name": credential.name})
    return redirect("client_list")
