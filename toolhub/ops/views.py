"""`/healthz`, `/readyz` and `/metrics`: no login, no session, no secrets; JSON (the metrics'
Prometheus text aside), also for a wrong method."""

from __future__ import annotations

import functools
import hmac
import ipaddress
import logging

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from toolhub.ops import health, metrics

logger = logging.getLogger(__name__)

READ_METHODS = ("GET", "HEAD")


def _error(status: int, message: str, **headers: str) -> JsonResponse:
    return JsonResponse({"errors": [{"message": message, "field": None, "line": None}]}, status=status, headers=headers)


def _read_only(view):
    @functools.wraps(view)
    def wrapper(request: HttpRequest) -> HttpResponse:
        if request.method not in READ_METHODS:
            allowed = ", ".join(READ_METHODS)
            return _error(405, f"Method {request.method} is not allowed here; use {allowed}.", Allow=allowed)
        return view(request)

    return csrf_exempt(never_cache(wrapper))


@_read_only
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers requests. It reads nothing, so a database or broker
    outage never makes an orchestrator restart a web process that would not help."""
    return JsonResponse({"status": "ok"})


@_read_only
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness (toolhub.ops.health): 200 when the database, the broker and at least one
    worker per work queue answer, else 503 with each check's result and the reasons."""
    result = health.readiness()
    return JsonResponse(result.as_dict(), status=200 if result.ready else 503)


def _networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for entry in settings.TOOLHUB_METRICS_ALLOW:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            # A typo in the setting opens nothing (and is said in the log), rather than a 500.
            if entry.strip():
                logger.error("TOOLHUB_METRICS_ALLOW: %r is not an address or a network; ignored", entry[:100])
    return networks


def metrics_allowed(request: HttpRequest) -> bool:
    """From an allowed address, or with the metrics token (compared in constant time)."""
    token = settings.TOOLHUB_METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        scheme, _, value = sent.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode()):
            return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in _networks())


@_read_only
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not metrics_allowed(request):
        return _error(403, "Metrics are not open to this address; send the metrics token.")
    return HttpResponse(generate_latest(metrics.registry()), content_type=CONTENT_TYPE_LATEST)
