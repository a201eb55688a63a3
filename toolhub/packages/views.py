from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Prefetch
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from toolhub.accounts.roles import can_manage_toolkit, is_admin
from toolhub.packages import services
from toolhub.packages.models import Approval, Decision, Package, PackageRequest
from toolhub.toolkits.models import Status
from toolhub.toolkits.selectors import get_toolkit_for_user
from toolhub.toolkits.views import _detail_context


def _admin_only(request: HttpRequest) -> None:
    # Non-admins are told nothing exists here.
    if not is_admin(request.user):
        raise Http404


@login_required
@require_GET
def package_queue(request: HttpRequest) -> HttpResponse:
    _admin_only(request)
    status = request.GET.get("status", Approval.PENDING)
    if status not in Approval.values:
        status = Approval.PENDING
    requests = PackageRequest.objects.select_related("revision__toolkit").order_by("revision__toolkit__slug")
    packages = (
        Package.objects.filter(status=status)
        .select_related("reviewed_by")
        .prefetch_related(Prefetch("requests", queryset=requests))
        .order_by("name")
    )
    decisions = Decision.objects.select_related("package", "decided_by")[:50]
    counts = dict(Package.objects.values_list("status").annotate(n=Count("pk")))
    statuses = [(value, label, counts.get(value, 0)) for value, label in Approval.choices]
    return render(
        request, "packages/queue.html",
        {"packages": packages, "status": status, "decisions": decisions, "statuses": statuses},
    )


@login_required
@require_POST
def package_decide(request: HttpRequest) -> HttpResponse:
    _admin_only(request)
    names = request.POST.getlist("name")
    action = request.POST.get("action")
    if not names or action not in ("approve", "reject"):
        messages.error(request, _("Choose at least one package and an action."))
        return redirect("package_queue")
    if action == "reject":
        reason = request.POST.get("reason", "").strip()
        if not reason:
            messages.error(request, _("Give a reason for rejecting; the toolkit's author will see it."))
            return redirect("package_queue")
        for name in names:
            services.package_reject(name=name, user=request.user, reason=reason)
        messages.success(request, _("Rejected: %(names)s") % {"names": ", ".join(names)})
    else:
        constraint = request.POST.get("constraint", "")
        try:
            for name in names:
                services.package_approve(name=name, user=request.user, constraint=constraint)
        except services.InvalidConstraint as exc:
            messages.error(request, str(exc))
            return redirect("package_queue")
        messages.success(request, _("Approved: %(names)s") % {"names": ", ".join(names)})
    return redirect("package_queue")


def _environment_context(request: HttpRequest, slug: str) -> dict:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    ctx = _detail_context(request, toolkit, "environment")
    # The Environment tab follows the newest revision: that is the one being built.
    ctx["shown"] = ctx["latest"] or ctx["revision"]
    ctx["live"] = ctx["shown"] is not None and ctx["shown"].status == Status.BUILDING
    return ctx


@login_required
@require_GET
def toolkit_environment(request: HttpRequest, slug: str) -> HttpResponse:
    return render(request, "packages/environment.html", _environment_context(request, slug))


@login_required
@require_GET
def toolkit_environment_live(request: HttpRequest, slug: str) -> HttpResponse:
    return render(request, "packages/_environment_live.html", _environment_context(request, slug))


@login_required
@require_POST
def toolkit_retry(request: HttpRequest, slug: str) -> HttpResponse:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    if not can_manage_toolkit(request.user, toolkit):
        return HttpResponseForbidden(_("Only the toolkit's owner and admins may retry a build."))
    revision = toolkit.latest_revision()
    if revision is None or revision.status not in (Status.FAILED, Status.REJECTED, Status.AWAITING_APPROVAL):
        messages.info(request, _("There is nothing to retry."))
    else:
        revision.lock = ""
        revision.environment_key = ""
        revision.save(update_fields=["lock", "environment_key"])
        services.revision_submit(revision=revision)
        messages.success(request, _("Build queued again."))
    return redirect("toolkit_environment", slug=toolkit.slug)
