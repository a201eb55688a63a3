"""Pages of model connections (admins only; everyone else is told nothing exists here)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import admin_required
from toolhub.agents import services
from toolhub.agents.forms import ModelConnectionForm
from toolhub.agents.models import ModelConnection


def _get_connection(pk: int) -> ModelConnection:
    return get_object_or_404(ModelConnection.objects.prefetch_related("groups"), pk=pk)


@login_required
@admin_required
@require_GET
def connection_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    connections = ModelConnection.objects.prefetch_related("groups").order_by("name")
    return render(request, "agents/connections.html", {"connections": connections})


def _save(request: AuthenticatedHttpRequest, form: ModelConnectionForm, connection: ModelConnection | None) -> ModelConnection | None:
    if not form.is_valid():
        return None
    try:
        if connection is None:
            return services.connection_create(data=form.to_input(), by=request.user)
        return services.connection_update(connection=connection, data=form.to_input())
    except services.ConnectionInvalid as exc:
        for field, message in exc.errors:
            form.add_error(field if field in form.fields else None, message)
    return None


@never_cache
@login_required
@admin_required
@require_http_methods(["GET", "POST"])
def connection_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = ModelConnectionForm(request.POST or None)
    if request.method == "POST":
        saved = _save(request, form, None)
        if saved is not None:
            messages.success(request, _("Connection %(name)s saved.") % {"name": saved.name})
            return redirect(saved)
    return render(request, "agents/connection_form.html", {"form": form, "connection": None})


@never_cache
@login_required
@admin_required
@require_http_methods(["GET", "POST"])
def connection_edit(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    connection = _get_connection(pk)
    form = ModelConnectionForm(request.POST or None, connection=connection)
    if request.method == "POST":
        saved = _save(request, form, connection)
        if saved is not None:
            messages.success(request, _("Connection %(name)s saved.") % {"name": saved.name})
            return redirect(saved)
    return render(request, "agents/connection_form.html", {"form": form, "connection": connection})


@login_required
@admin_required
@require_POST
def connection_test(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """Lists the endpoint's models: an HTML fragment for the page's htmx button."""
    connection = _get_connection(pk)
    try:
        found = services.connection_list_models(connection=connection)
    except services.ModelError as exc:
        context = {"connection": connection, "error": str(exc)}
    else:
        missing = [m for m in connection.offered_models if m not in found]
        context = {"connection": connection, "found": found, "missing": missing}
    return render(request, "agents/_test_result.html", context)


@login_required
@admin_required
@require_POST
def connection_delete(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    connection = _get_connection(pk)
    services.connection_delete(connection=connection)
    messages.success(request, _("Connection %(name)s deleted.") % {"name": connection.name})
    return redirect("model_connection_list")
