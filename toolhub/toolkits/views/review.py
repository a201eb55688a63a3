"""The admins' review queue: revisions that would receive an admin's secret Valves or egress
grant, uploaded by someone who is not an admin (toolhub.toolkits.lifecycle, `awaiting_review`)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import admin_required
from toolhub.packages.services import MAX_REASON_CHARS
from toolhub.toolkits import lifecycle, selectors, tool_tests
from toolhub.toolkits.valves import admin_secrets_by_toolkit
from toolhub.toolkits.views.tool_tests import case_rows

# Revisions per page, and the diff lines each shows at most (the whole diff is on the diff
# page: two sources of 512 KiB may differ in a hundred thousand lines).
REVIEW_PAGE = 10
REVIEW_DIFF_LINES = 500


@login_required
@admin_required
@require_GET
def revision_queue(request: AuthenticatedHttpRequest) -> HttpResponse:
    page = Paginator(selectors.revisions_awaiting_review(), REVIEW_PAGE).get_page(request.GET.get("page"))
    secrets = admin_secrets_by_toolkit([revision.toolkit_id for revision in page])
    # Revisions held because their tests failed show the failed cases next to the diff.
    failed_runs = tool_tests.failed_gate_runs([revision.pk for revision in page])
    items = []
    for revision in page:
        current = revision.toolkit.current_revision
        diff = selectors.revision_diff(a=current, b=revision) if current else []
        items.append({
            "revision": revision,
            "current": current,
            "diff": diff[:REVIEW_DIFF_LINES],
            "diff_cut": len(diff) > REVIEW_DIFF_LINES,
            "new_hosts": revision.hosts_new_since(current) if current else sorted(revision.hosts or []),
            "secrets": secrets.get(revision.toolkit_id, []),
            "test_run": failed_runs.get(revision.pk),
            "cases": case_rows(failed_runs[revision.pk]) if revision.pk in failed_runs else [],
        })
    return render(request, "packages/reviews.html", {"page": page, "items": items, "review_count": page.paginator.count, "reason_max": MAX_REASON_CHARS})


@login_required
@admin_required
@require_POST
def revision_review(request: AuthenticatedHttpRequest, revision_id: int) -> HttpResponse:
    action = request.POST.get("action")
    if action not in ("approve", "reject"):
        return HttpResponseBadRequest()
    back = redirect("revision_queue")
    reason = request.POST.get("reason", "").strip()
    if action == "reject" and not reason:
        messages.error(request, _("Give a reason for rejecting; the toolkit's author will see it."))
        return back
    if len(reason) > MAX_REASON_CHARS:
        messages.error(request, _("The reason is longer than %(n)s characters.") % {"n": MAX_REASON_CHARS})
        return back
    if action == "approve" and not reason and tool_tests.failed_gate_runs([revision_id]):
        messages.error(request, _("Its tests failed: give a reason for approving it anyway; it is recorded."))
        return back
    revision = lifecycle.review_decide(revision_id=revision_id, user=request.user, approve=action == "approve", reason=reason)
    if revision is None:
        messages.info(request, _("That revision no longer awaits review."))
        return back
    toolkit = revision.toolkit
    toolkit.refresh_from_db(fields=["current_revision"])
    names = {"slug": toolkit.slug, "n": revision.number}
    if action == "approve" and toolkit.current_revision_id == revision.pk:
        messages.success(request, _("Approved revision %(n)s of %(slug)s: it is current now.") % names)
    elif action == "approve":
        # A newer ready revision (an admin's own, say) stays current.
        messages.success(request, _("Approved revision %(n)s of %(slug)s; a newer revision stays current.") % names)
    else:
        messages.success(request, _("Rejected revision %(n)s of %(slug)s: the current revision stays.") % names)
    return back
