"""Package approval and the path of a revision from upload to `building`."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidName, canonicalize_name

from toolhub.packages.models import Approval, Decision, Package, PackageRequest
from toolhub.toolkits.models import Revision, Status


class InvalidDecision(ValueError):
    """A decision an admin asked for that cannot be made; `field` names the bad input."""

    field = "name"


class InvalidConstraint(InvalidDecision):
    field = "constraint"


class InvalidPackageName(InvalidDecision):
    field = "name"


class MissingReason(InvalidDecision):
    field = "reason"


def normalise(name: str) -> str:
    return canonicalize_name(name)


def validate_name(name: str) -> str:
    """The PEP 503 form of a package name an admin typed or posted; refuses anything that
    is not a project name, so no row is ever made for a name no requirement could use."""
    try:
        return canonicalize_name(name.strip(), validate=True)
    except InvalidName:
        raise InvalidPackageName(f"{name!r} is not a valid package name.") from None


def revision_submit(*, revision: Revision, extra_names: dict[str, str] | None = None) -> None:
    """Record which packages a revision asks for and move it to `awaiting_approval`,
    `rejected` or `building` (then queue the build once the transaction commits).
    `extra_names` are transitive names found in its lock (name -> pinned specifier)."""
    wanted = {normalise(r["name"]): r["specifier"] for r in revision.requirements}
    transitive = {normalise(n): s for n, s in (extra_names or {}).items()}
    transitive = {n: s for n, s in transitive.items() if n not in wanted}
    with transaction.atomic():
        # The package rows are locked, in name order, before their status is read: a decision
        # committing meanwhile either sees this revision's requests or is seen by evaluate().
        for name in sorted({*wanted, *transitive}):
            package = _locked_package(name)
            PackageRequest.objects.update_or_create(
                package=package, revision=revision,
                defaults={"specifier": wanted.get(name, transitive.get(name, "")), "transitive": name in transitive},
            )
        evaluate(revision=revision)


def evaluate(*, revision: Revision) -> None:
    requests = revision.package_requests.all()
    if not settings.TOOLHUB_APPROVE_TRANSITIVE:
        # Names found only in a lock hold nothing back once the setting is off again.
        requests = requests.filter(transitive=False)
    names = list(requests.values_list("package__name", "package__status", "package__reason"))
    rejected = sorted((n, reason) for n, status, reason in names if status == Approval.REJECTED)
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
    revision_id = revision.pk
    transaction.on_commit(lambda: build_revision.delay(revision_id))


def _locked_package(name: str) -> Package:
    package, _ = Package.objects.select_for_update().get_or_create(name=name)
    return package


def _decide(*, names: Iterable[str], status: str, user, constraint: str = "", reason: str = "") -> list[Package]:
    """Record one decision for each name, then move every revision that waited on them.
    All or nothing: a bulk decision is one transaction."""
    now = timezone.now()
    with transaction.atomic():
        # Packages first, in name order, then revisions in id order: two decisions that
        # overlap lock rows in the same order and so cannot deadlock.
        packages = []
        for name in sorted(set(names)):
            package = _locked_package(name)
            package.status = status
            package.constraint = constraint
            package.reason = reason
            package.reviewed_by = user
            package.reviewed_at = now
            package.save()
            Decision.objects.create(
                package=package, status=status, constraint=constraint, reason=reason, decided_by=user, decided_at=now
            )
            packages.append(package)
        waiting = (
            Revision.objects.select_for_update()
            .filter(
                pk__in=PackageRequest.objects.filter(package__in=packages).values("revision_id"),
                status__in=[Status.AWAITING_APPROVAL, Status.REJECTED],
            )
            .order_by("pk")
        )
        for revision in waiting:
            evaluate(revision=revision)
    return packages


def _clean_constraint(constraint: str) -> str:
    constraint = constraint.strip()
    if constraint:
        try:
            SpecifierSet(constraint)
        except InvalidSpecifier as exc:
            raise InvalidConstraint(f"{constraint!r} is not a version specifier (e.g. >=2,<3).") from exc
    return constraint


def packages_approve(*, names: Iterable[str], user, constraint: str = "") -> list[Package]:
    """Approve packages (an optional constraint applies to each); checks every input before
    changing anything."""
    constraint = _clean_constraint(constraint)
    cleaned = [validate_name(name) for name in names]
    return _decide(names=cleaned, status=Approval.APPROVED, user=user, constraint=constraint)


def packages_reject(*, names: Iterable[str], user, reason: str) -> list[Package]:
    """Reject packages; the reason is shown to the authors of the toolkits that asked."""
    reason = reason.strip()
    if not reason:
        raise MissingReason("Give a reason for rejecting; the toolkit's author will see it.")
    cleaned = [validate_name(name) for name in names]
    return _decide(names=cleaned, status=Approval.REJECTED, user=user, reason=reason)


def package_approve(*, name: str, user, constraint: str = "") -> Package:
    [package] = packages_approve(names=[name], user=user, constraint=constraint)
    return package


def package_reject(*, name: str, user, reason: str) -> Package:
    [package] = packages_reject(names=[name], user=user, reason=reason)
    return package


def approved_constraints() -> list[str]:
    return [f"{p.name}{p.constraint}" for p in Package.objects.filter(status=Approval.APPROVED).exclude(constraint="")]
