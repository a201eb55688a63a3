"""Reads of package approvals for the queue page and the packages API: only the columns they
show (a revision's source, lock and build log stay in the database), each package with the
first of its requests and how many there are."""

from __future__ import annotations

from django.db.models import Count, Prefetch, QuerySet

from toolhub.packages.models import Approval, Decision, Package, PackageRequest


def packages_with_requests(*, status: str | None = None, requests_shown: int) -> QuerySet[Package]:
    """Packages by name, annotated with `requested_count`; the first `requests_shown` of
    their requests are in `shown_requests`."""
    requests = (
        PackageRequest.objects.select_related("revision__toolkit")
        .only("package_id", "specifier", "transitive", "import_name", "import_line", "optional",
              "revision__number", "revision__toolkit__slug")
        .order_by("revision__toolkit__slug", "revision__number")
    )
    packages = Package.objects.all() if status is None else Package.objects.filter(status=status)
    return (
        packages.select_related("reviewed_by")
        .only("name", "status", "constraint", "source_build", "reason", "reviewed_at", "reviewed_by__username",
              "index_state", "index_info", "index_requested_at", "index_checked_at")
        .annotate(requested_count=Count("requests"))
        .prefetch_related(Prefetch("requests", queryset=requests[:requests_shown], to_attr="shown_requests"))
        .order_by("name")
    )


def package_counts() -> dict[str, int]:
    """How many packages are in each approval state (every state present)."""
    counts = dict(Package.objects.values_list("status").annotate(n=Count("pk")))
    return {value: counts.get(value, 0) for value in Approval.values}


def decisions_recent(*, limit: int = 50) -> QuerySet[Decision]:
    return Decision.objects.select_related("package", "decided_by").only(
        "status", "constraint", "source_build", "reason", "decided_at", "package__name", "decided_by__username"
    )[:limit]


def package_for_queue(*, name: str) -> Package | None:
    """One package's index information (the queue's polled cell)."""
    return Package.objects.only("name", "status", "index_state", "index_info", "index_requested_at", "index_checked_at").filter(name=name).first()


def pending_count() -> int:
    return Package.objects.filter(status=Approval.PENDING).count()


def decided_for_revision(*, revision_id: int) -> QuerySet[Package]:
    """The packages a revision asks for that an admin has decided on, with who and when."""
    return (
        Package.objects.filter(requests__revision_id=revision_id, reviewed_at__isnull=False)
        .select_related("reviewed_by").only("name", "status", "reason", "reviewed_at", "reviewed_by__username")
        .order_by("name")
    )
