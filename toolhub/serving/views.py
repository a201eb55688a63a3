"""The Connect page (every host an LLM app may be, filled in for one credential) and each
toolkit's Connect tab: the URLs and snippets an LLM app needs, with copy buttons."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Max
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from toolhub.accounts.models import DEFAULT_USER_HEADER, ClientCredential
from toolhub.accounts.roles import admin_required, is_admin
from toolhub.runs.models import Invocation, RunStatus, Surface
from toolhub.runs.rendering import render_markdown
from toolhub.serving.catalog import catalog
from toolhub.serving.limits import SERVED_SURFACES
from toolhub.toolkits.access import toolkit_usable_by
from toolhub.toolkits.selectors import get_toolkit_for_user
from toolhub.toolkits.views.toolkit import detail_context

# The credentials an admin may pick from on the Connect page (newest first, the rest by name
# on the Clients page).
CONNECT_CREDENTIALS = 200


@login_required
@require_GET
def connect_page(request: HttpRequest) -> HttpResponse:
    """One block per host (Open WebUI over OpenAPI and over MCP, LibreChat, Dify, RAGFlow, any
    MCP client) with what to type where, for the chosen credential: admins pick one of the
    client credentials, anyone may use their own API token. The token itself is never shown
    again (only its hash is kept): it is pasted into the page's token field, and the page's
    script fills it into the snippets in the browser."""
    base = request.build_absolute_uri("/").rstrip("/")
    admin = is_admin(request.user)
    credentials = list(ClientCredential.objects.active().order_by("name")[:CONNECT_CREDENTIALS]) if admin else []
    chosen = None
    client_id = request.GET.get("client", "")
    if admin and client_id.isdigit():
        chosen = next((c for c in credentials if c.pk == int(client_id)), None)
    # A toolkit's own URLs when one is named and the person may use it; else every toolkit.
    toolkit = None
    slug = request.GET.get("toolkit", "")[:64]
    if slug:
        toolkit = toolkit_usable_by(request.user, slug)
    suffix = f"/{toolkit.slug}" if toolkit is not None else ""
    header = chosen.user_header if chosen is not None and chosen.acts_for_users else ""
    return render(request, "serving/connect_page.html", {
        "credentials": credentials, "chosen": chosen, "client_id": client_id, "is_admin": admin,
        "toolkit": toolkit, "header": header, "openwebui_header": DEFAULT_USER_HEADER,
        "mcp_url": f"{base}/mcp{suffix}", "openapi_url": f"{base}/openapi{suffix}",
        "host_port": request.get_host(),
    })


@login_required
@require_GET
def toolkit_connect(request: HttpRequest, slug: str) -> HttpResponse:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    ctx = detail_context(request, toolkit, "connect")
    base = request.build_absolute_uri("/").rstrip("/")
    ctx.update(
        connect_url=f"{reverse('connect')}?toolkit={toolkit.slug}",
        mcp_url=f"{base}/mcp/{toolkit.slug}",
        mcp_all_url=f"{base}/mcp",
        openapi_url=f"{base}/openapi/{toolkit.slug}",
        openapi_all_url=f"{base}/openapi",
        tools=catalog(request.user, toolkit.slug),
        user_header=DEFAULT_USER_HEADER,
        can_create_clients=is_admin(request.user),
    )
    return render(request, "serving/connect.html", ctx)


# The guides in docs/ that the dashboard shows (English, as written), by the name in their URL.
GUIDES = {"connect": "connect.md", "toolkit-format": "toolkit-format.md"}


@login_required
@require_GET
def guide(request: HttpRequest, name: str) -> HttpResponse:
    """A guide from the repository's docs/, rendered as Markdown (raw HTML off, sanitised), so
    the pages can link to it instead of naming a file."""
    filename = GUIDES.get(name)
    if filename is None:
        raise Http404
    text = (settings.BASE_DIR / "docs" / filename).read_text(encoding="utf-8")
    return render(request, "serving/guide.html", {"content": render_markdown(text), "name": name})


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
