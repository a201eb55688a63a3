"""The Connect tab of a toolkit: the URLs and snippets an LLM app needs, with copy buttons."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from toolhub.accounts.models import DEFAULT_USER_HEADER, ClientCredential
from toolhub.accounts.roles import admin_required, is_admin
from toolhub.runs.models import Invocation, RunStatus, Surface
from toolhub.serving.catalog import catalog
from toolhub.serving.limits import SERVED_SURFACES
from toolhub.toolkits.selectors import get_toolkit_for_user
from toolhub.toolkits.views import detail_context


@login_required
@require_GET
def toolkit_connect(request: HttpRequest, slug: str) -> HttpResponse:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    ctx = detail_context(request, toolkit, "connect")
    base = request.build_absolute_uri("/").rstrip("/")
    ctx.update(
        mcp_url=f"{base}/mcp/{toolkit.slug}",
        mcp_all_url=f"{base}/mcp",
        openapi_url=f"{base}/openapi/{toolkit.slug}",
        openapi_all_url=f"{base}/openapi",
        tools=catalog(request.user, toolkit.slug),
        user_header=DEFAULT_USER_HEADER,
        can_create_clients=is_admin(request.user),
    )
    return render(request, "serving/connect.html", ctx)


AUDIT_PERIODS = {"1": 1, "7": 7, "30": 30}
AUDIT_ROWS = 200


@login_required
@admin_required
@require_GET
def serving_audit(request: HttpRequest) -> HttpResponse:
    """Calls through MCP and the OpenAPI tool servers, counted by client, user, toolkit and
    outcome over a period (admins)."""
    days_key = request.GET.get("days", "7")
    days = AUDIT_PERIODS.get(days_key, 7)
    since = timezone.now() - timedelta(days=days)
    qs = Invocation.objects.filter(surface__in=SERVED_SURFACES, created_at__gte=since)
    credentials = list(ClientCredential.objects.order_by("name").values_list("pk", "name"))
    client_id = request.GET.get("client", "")
    if client_id == "none":
        qs = qs.filter(client__isnull=True)
    elif client_id.isdigit():
        qs = qs.filter(client_id=int(client_id))
    statuses, surfaces = dict(RunStatus.choices), dict(Surface.choices)
    rows: list[dict[str, Any]] = [
        {**row, "status_label": statuses.get(row["status"], row["status"]),
         "surface_label": surfaces.get(row["surface"], row["surface"])}
        for row in qs.values("client__name", "user__username", "toolkit__slug", "surface", "status")
        .annotate(calls=Count("id"), last=Max("created_at"))
        .order_by("-calls", "client__name", "user__username", "toolkit__slug")[:AUDIT_ROWS]
    ]
    return render(request, "serving/audit.html", {
        "rows": rows, "days": str(days),
        "periods": [("1", _("last 24 hours")), ("7", _("last 7 days")), ("30", _("last 30 days"))], "credentials": credentials,
        "client_id": client_id, "total": sum(r["calls"] for r in rows), "limit": AUDIT_ROWS,
    })
