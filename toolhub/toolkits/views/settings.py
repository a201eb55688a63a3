"""The Valves tab (admins) and the My settings tab (every user, for themself)."""

from __future__ import annotations

from functools import partial

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import add_never_cache_headers
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import is_admin
from toolhub.toolkits import schema_forms, valves
from toolhub.toolkits.display import resolve
from toolhub.toolkits.selectors import get_toolkit_for_user
from toolhub.toolkits.views.toolkit import detail_context
from toolhub.vault.secret_fields import merge_submitted


def _settings_page(request: HttpRequest, slug: str, *, admin_valves: bool) -> HttpResponse:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    if admin_valves and not is_admin(request.user):
        raise Http404
    owner = None if admin_valves else request.user
    ctx = detail_context(request, toolkit, "valves" if admin_valves else "settings")
    revision = ctx["revision"]
    schema = (revision.valves_schema if admin_valves else revision.user_valves_schema) if revision else None
    ctx["schema"] = schema
    if not schema:
        return render(request, "toolkits/valves.html", ctx)
    secrets = valves.schema_secrets(schema)
    stored = valves.load_values(toolkit=toolkit, user=owner)
    errors: dict[str, list[str]] = {}
    values = stored
    if admin_valves:
        ctx["user_value_owners"] = _user_value_owners(toolkit)
    if request.method == "POST":
        if admin_valves and request.POST.get("action") == "reset_user":
            # Admins may wipe a user's settings (e.g. a leaked key) but never read them.
            target = toolkit.valve_sets.filter(user_id=_int_or_none(request.POST.get("user"))).first()
            if target is None:
                raise Http404
            valves.reset_values(toolkit=toolkit, user=target.user)
            messages.success(request, _("The settings of %(user)s were reset.") % {"user": target.user.username if target.user else ""})
            return redirect(request.path)
        if request.POST.get("action") == "reset":
            valves.reset_values(toolkit=toolkit, user=owner)
            messages.success(request, _("Settings reset to the toolkit's defaults."))
            return redirect(request.path)
        submitted, errors = schema_forms.parse_submission(schema, request.POST, secret_names=secrets)
        clear = schema_forms.clear_requests(schema, request.POST, secret_names=secrets)
        if errors:
            # Shown again as typed, without saving.
            values = merge_submitted(stored, submitted, secrets, clear)
        else:
            # The admin's Valves go to the revision the form was made for (the page sends its
            # number), or nowhere.
            shown = _int_or_none(request.POST.get("revision")) if admin_valves else None
            values, errors = valves.values_save(
                toolkit=toolkit, schema=schema, submitted=submitted, user=owner, by=request.user, clear=clear,
                shown_revision=shown,
            )
            if not values:
                # A stale form: show what was typed again, nothing was saved.
                values = merge_submitted(stored, submitted, secrets, clear)
        if not errors:
            messages.success(request, _("Settings saved."))
            return redirect(request.path)
    else:
        # Values saved under an earlier revision's schema that no longer validate are
        # flagged here rather than breaking invocations silently.
        stale = schema_forms.validate(schema, stored) if stored else {}
        ctx["stale"] = stale
        errors = stale
    ctx["fields"] = schema_forms.build_fields(
        schema,
        {k: v for k, v in values.items() if k not in secrets},
        secret_names=secrets,
        is_set={name: bool(stored.get(name)) for name in secrets},
        resolve=partial(_resolve_text, toolkit=toolkit),
        errors=errors,
        data=request.POST if request.method == "POST" else None,
        keep_typed_secrets=True,
    )
    ctx["errors"] = errors
    ctx["form_errors"] = errors.get("__all__", [])
    response = render(request, "toolkits/valves.html", ctx)
    # A rejected submission's page holds the secrets typed in it: no cache may keep it.
    add_never_cache_headers(response)
    return response


def _user_value_owners(toolkit):
    return [row.user for row in toolkit.valve_sets.filter(user__isnull=False).select_related("user").order_by("user__username")]


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _resolve_text(text: str, *, toolkit) -> str:
    return resolve(text, toolkit=toolkit).text


@login_required
@require_http_methods(["GET", "POST"])
def toolkit_valves(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    return _settings_page(request, slug, admin_valves=True)


@login_required
@require_http_methods(["GET", "POST"])
def toolkit_user_valves(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    return _settings_page(request, slug, admin_valves=False)
