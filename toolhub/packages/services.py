"""Package approval and the path of a revision from upload to `building`."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from toolhub.packages.models import Approval, Decision, Package, PackageRequest
from toolhub.toolkits.models import Revision, Status


class InvalidConstraint(ValueError):
    pass


def normalise(name: str) -> str:
    return canonicalize_name(name)


def revision_submit(*, revision: Revision, extra_names: dict[str, str] | None = None) -> None:
    """Record which packages a revision asks for and move it to `awaiting_approval`,
    `rejected` or `building` (then queue the build once the transaction commits).
    `extra_names` are transitive names found in its lock (name -> pinned specifier)."""
    wanted = {r["name"]: r["specifier"] for r in revision.requirements}
    transitive = {n: s for n, s in (extra_names or {}).items() if n not in wanted}
    for name, specifier in [*wanted.items(), *transitive.items()]:
        package, _ = Package.objects.get_or_create(name=normalise(name))
        PackageRequest.objects.update_or_create(
            package=package, revision=revision,
            defaults={"specifier": specifier, "transitive": name in transitive},
        )
    evaluate(revision=revision)


def evaluate(*, revision: Revision) -> None:
    names = list(revision.package_requests.values_list("package__name", "package__status", "package__reason"))
    rejected = [(n, reason) for n, status, reason in names if status == Approval.REJECTED]
    pending = sorted(n for n, status, _ in names if status == Approval.PENDING)
    if rejected:
        detail = "; ".join(f"package {n} was rejected" + (f": {reason}" if reason else "") for n, reason in rejected)
        revision.set_status(Status.REJECTED, detail)
        revision.save(update_fields=["status", "status_detail", "status_changed_at"])
    elif pending:
        revision.set_status(Status.AWAITING_APPROVAL, "Waiting for an admin to approve: " + ", ".join(pending))
        revision.save(update_fields=["status", "status_detail", "status_changed_at"])
    else:
        queue_build(revision=revision)


def queue_build(*, revision: Revision) -> None:
    from toolhub.packages.tasks import build_revision

    revision.set_status(Status.BUILDING, "Queued for build")
    revision.build_log = ""
    revision.save(update_fields=["status", "status_detail", "status_changed_at", "build_log"])
    transaction.on_commit(lambda: build_revision.delay(revision.pk))


def _waiting_revisions(package: Package):
    return Revision.objects.filter(
        package_requests__package=package,
        status__in=[Status.AWAITING_APPROVAL, Status.REJECTED],
    ).distinct()


def _decide(*, package: Package, status: str, user, constraint: str = "", reason: str = "") -> Package:
    with transaction.atomic():
        package.status = status
        package.constraint = constraint
        package.reason = reason
        package.reviewed_by = user
        package.reviewed_at = timezone.now()
        package.save()
        Decision.objects.create(package=package, status=status, constraint=constraint, reason=reason, decided_by=user)
        for revision in _waiting_revisions(package):
            evaluate(revision=revision)
    return package


def package_approve(*, name: str, user, constraint: str = "") -> Package:
    constraint = constraint.strip()
    if constraint:
        try:
            SpecifierSet(constraint)
        except InvalidSpecifier as exc:
            raise InvalidConstraint(f"{constraint!r} is not a version specifier (e.g. >=2,<3).") from exc
    package, _ = Package.objects.get_or_create(name=normalise(name))
    return _decide(package=package, status=Approval.APPROVED, user=user, constraint=constraint)


def package_reject(*, name: str, user, reason: str) -> Package:
    package, _ = Package.objects.get_or_create(name=normalise(name))
    return _decide(package=package, status=Approval.REJECTED, user=user, reason=reason.strip())


def approved_constraints() -> list[str]:
    return [f"{p.name}{p.constraint}" for p in Package.objects.filter(status=Approval.APPROVED).exclude(constraint="")]
