from __future__ import annotations

import re
import sys
import tempfile

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import admin_required, is_admin
from toolhub.packages import index_checks, services
from toolhub.packages import selectors as package_selectors
from toolhub.packages.models import Approval
from toolhub.toolkits import lifecycle
from toolhub.toolkits import selectors as toolkit_selectors
from toolhub.toolkits.models import Status
from toolhub.toolkits.selectors import get_toolkit_for_user, get_toolkit_to_manage
from toolhub.toolkits.views.toolkit import detail_context

# Packages per page of the queue, and the requests listed for each (the rest are counted).
QUEUE_PAGE = 50
QUEUE_REQUESTS = 20


def hide_host_paths(text: str) -> str:
    """A build log or traceback as a non-admin may see it: the folders of this host it names
    (the data dir with its environments, the project, the web process's venv, the temporary
    folder) are named by what they are (`<data>/wheelhouse`) rather than where they are."""
    if not text:
        return text
    roots = {
        str(settings.TOOLHUB_ENVIRONMENTS_DIR): "<environments>",
        str(settings.DATA_DIR): "<data>",
        str(settings.BASE_DIR): "<toolhub>",
        sys.prefix: "<venv>",
        tempfile.gettempdir(): "<tmp>",
    }
    labels = {root.rstrip("/"): label for root, label in roots.items() if len(root.rstrip("/")) > 1}
    # Longest first: the data dir wins over a temporary folder that holds it.
    ordered = sorted(labels, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(root) + r"(?![\w.-])" for root in ordered))
    return pattern.sub(lambda match: labels[match.group(0)], text)


@login_required
@admin_required
@require_GET
def package_queue(request: AuthenticatedHttpRequest) -> HttpResponse:
    status = request.GET.get("status", Approval.PENDING)
    if status not in Approval.values:
        status = Approval.PENDING
    packages = package_selectors.packages_with_requests(status=status, requests_shown=QUEUE_REQUESTS)
    page = Paginator(packages, QUEUE_PAGE).get_page(request.GET.get("page"))
    for package in page:
        # Set by the annotation and the prefetch above (names the stubs cannot see).
        shown = len(getattr(package, "shown_requests"))  # noqa: B009
        setattr(package, "more_requests", getattr(package, "requested_count") - shown)  # noqa: B009,B010
    # What the index says about each name: looked up by a task, never while the page waits.
    index_checks.queue_checks(page)
    # The imports shown as inferred, each with its own (hidden) remap form.
    inferred_modules = sorted({r.import_name for package in page for r in getattr(package, "shown_requests") if r.import_name})  # noqa: B009
    decisions = package_selectors.decisions_recent(limit=50)
    counts = package_selectors.package_counts()
    statuses = [(value, _tab_label(value, counts[value])) for value in Approval.values]
    return render(
        request, "packages/queue.html",
        {"packages": page, "page": page, "status": status, "decisions": decisions, "statuses": statuses,
         "inferred_modules": inferred_modules, "review_count": toolkit_selectors.review_count(), **_index_context(),
         "pending_count": counts[Approval.PENDING], "constraint_max": 200, "reason_max": services.MAX_REASON_CHARS},
    )


@login_required
@admin_required
@require_GET
def package_index(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """The queue's cell of what the index says about one package (polled while it is checked)."""
    package = package_selectors.package_for_queue(name=name)
    if package is None:
        raise Http404
    return render(request, "packages/_index_info.html", {"p": package, **_index_context()})


def _index_context() -> dict:
    return {"index_checks": index_checks.enabled(), "target_python": "{}.{}".format(*index_checks.target_python())}


@login_required
@admin_required
@require_POST
def package_decide(request: AuthenticatedHttpRequest) -> HttpResponse:
    # Keep the order the admin saw, without repeats.
    names = list(dict.fromkeys(name.strip() for name in request.POST.getlist("name") if name.strip()))
    action = request.POST.get("action")
    back = redirect(_queue_url(request.POST.get("status")))
    if not names or action not in ("approve", "reject"):
        messages.error(request, _("Choose at least one package and an action."))
        return back
    reason = request.POST.get("reason", "").strip()
    if action == "reject" and not reason:
        messages.error(request, _("Give a reason for rejecting; the toolkit's author will see it."))
        return back
    try:
        if action == "reject":
            lifecycle.packages_reject(names=names, user=request.user, reason=reason)
        else:
            lifecycle.packages_approve(
                names=names, user=request.user, constraint=request.POST.get("constraint", ""),
                unknown_confirmed=request.POST.getlist("approve_unknown"),
                source_build=request.POST.get("source_build") == "on",
            )
    except services.InvalidDecision as exc:
        messages.error(request, str(exc))
        return back
    done = _("Rejected: %(names)s") if action == "reject" else _("Approved: %(names)s")
    messages.success(request, done % {"names": ", ".join(names)})
    return back


@login_required
@admin_required
@require_POST
def package_remap(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Map an inferred import to another distribution name, for every toolkit from now on."""
    module = request.POST.get("module", "").strip()
    distribution = request.POST.get("distribution", "").strip()
    back = redirect(_queue_url(request.POST.get("status")))
    if not module or not distribution:
        messages.error(request, _("Name the distribution that provides the import."))
        return back
    try:
        changed = lifecycle.import_remap(module=module, distribution=distribution, user=request.user)
    except services.InvalidDecision as exc:
        messages.error(request, str(exc))
        return back
    messages.success(request, ngettext(
        "import %(module)s now means %(name)s; %(n)s waiting revision asks for it instead.",
        "import %(module)s now means %(name)s; %(n)s waiting revisions ask for it instead.",
        changed,
    ) % {"module": module, "name": services.normalise(distribution), "n": changed})
    return back


def _tab_label(status: str, count: int) -> str:
    """A tab of the queue with its count, in a form that agrees with the count (in French
    "Approuvé (1)" but "Approuvés (2)")."""
    labels: dict[str, str] = {
        Approval.PENDING: ngettext("Pending (%(n)s)", "Pending (%(n)s)", count),
        Approval.APPROVED: ngettext("Approved (%(n)s)", "Approved (%(n)s)", count),
        Approval.REJECTED: ngettext("Rejected (%(n)s)", "Rejected (%(n)s)", count),
    }
    return labels[status] % {"n": count}


def _queue_url(status: str | None) -> str:
    # Back to the tab the decision was made on.
    url = reverse("package_queue")
    return f"{url}?status={status}" if status in Approval.values and status != Approval.PENDING else url


def _environment_context(request: HttpRequest, slug: str) -> dict:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    ctx = detail_context(request, toolkit, "environment")
    # The Environment tab follows the newest revision: that is the one being built, unless
    # a rollback is rebuilding the current one.
    latest, current = ctx["latest"], ctx["revision"]
    shown = latest or current
    if current is not None and current.status == Status.BUILDING and shown.status != Status.BUILDING:
        shown = current
    ctx["shown"] = shown
    ctx["live"] = shown is not None and shown.status == Status.BUILDING
    if shown is not None:
        # Admins see the log as written; everyone else without this host's paths.
        keep = is_admin(request.user)
        ctx["build_log"] = shown.build_log if keep else hide_host_paths(shown.build_log)
        ctx["traceback"] = shown.traceback if keep else hide_host_paths(shown.traceback)
    return ctx


@login_required
@require_GET
def toolkit_environment(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    return render(request, "packages/environment.html", _environment_context(request, slug))


@login_required
@require_GET
def toolkit_environment_live(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    """The polled fragment of the Environment tab (with the toolkit's heading out of band,
    so that the status at the top of the page follows the build too)."""
    return render(request, "packages/_environment_live.html", _environment_context(request, slug))


@login_required
@require_POST
def toolkit_retry(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = get_toolkit_to_manage(
        user=request.user, slug=slug, refusal=_("Only the toolkit's owner and admins may retry a build.")
    )
    latest = toolkit.latest_revision()
    revision = lifecycle.retry(revision_id=latest.pk) if latest is not None else None
    if revision is None:
        messages.info(request, _("There is nothing to retry."))
        return redirect("toolkit_environment", slug=toolkit.slug)
    # The decisions on its packages may still hold the revision back; say what happened.
    if revision.status == Status.BUILDING:
        messages.success(request, _("Build queued again."))
    else:
        messages.warning(request, revision.detail_shown())
    return redirect("toolkit_environment", slug=toolkit.slug)
