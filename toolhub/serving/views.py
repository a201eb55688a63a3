"""The Connect tab of a toolkit: the URLs and snippets an LLM app needs, with copy buttons."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from toolhub.accounts.models import DEFAULT_USER_HEADER
from toolhub.accounts.roles import is_admin
from toolhub.serving.catalog import catalog
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
