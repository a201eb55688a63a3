"""Package approvals: which packages revisions ask for, and the decisions admins record.
What a decision means for a revision is the lifecycle's business (toolhub.toolkits.lifecycle);
this module never imports the toolkits app."""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidName, canonicalize_name

from toolhub.packages import index_checks
from toolhub.packages.models import Approval, Decision, ImportMapping, IndexState, Package, PackageRequest

# The reason for a rejection is shown to every author who asked; 2,000 characters is plenty.
MAX_REASON_CHARS = 2000


class InvalidDecision(ValueError):
    """A decision an admin asked for that cannot be made; `field` names the bad input."""

    field = "name"


class InvalidConstraint(InvalidDecision):
    field = "constraint"


class InvalidPackageName(InvalidDecision):
    field = "name"


class MissingReason(InvalidDecision):
    field = "reason"


class NotOnIndex(InvalidDecision):
    """An approval of a name the package index does not know, not confirmed as meant."""

    field = "name"


class IndexNotAnswered(InvalidDecision):
    """An approval of a name whose index check has not answered yet, not confirmed as meant:
    the admin would approve an unknown name without the warning."""

    field = "name"


def normalise(name: str) -> str:
    return canonicalize_name(name)


def validate_name(name: str) -> str:
    """The PEP 503 form of a package name an admin typed or posted; refuses anything that
    is not a project name, so no row is ever made for a name no requirement could use."""
    limit = Package._meta.get_field("name").max_length or 200
    if len(name) > limit:
        raise InvalidPackageName(_("A package name has at most %(limit)s characters.") % {"limit": limit})
    try:
        return canonicalize_name(name.strip(), validate=True)
    except InvalidName:
        raise InvalidPackageName(_("%(name)s is not a valid package name.") % {"name": repr(name)}) from None


def requests_record(
    *, revision_id: int, wanted: dict[str, str], transitive: dict[str, str],
    inferred: dict[str, tuple[str, int]] | None = None, optional: Iterable[str] = (),
) -> None:
    """Record which packages a revision asks for: `wanted` from its requirements and
    `transitive` found only in its lock (name -> specifier); `inferred` marks the wanted
    names that come from an import rather than `requirements:` (name -> (module, line)), and
    `optional` those of imports the toolkit can do without. Call inside the transaction
    that then evaluates the revision: the package rows are locked, in name order, before
    their status is read, so a decision committing meanwhile either sees these requests or
    is seen by the evaluation."""
    wanted = {normalise(n): s for n, s in wanted.items()}
    sites = {normalise(n): site for n, site in (inferred or {}).items()}
    optional = {normalise(n) for n in optional}
    transitive = {n: s for n, s in ((normalise(n), s) for n, s in transitive.items()) if n not in wanted}
    names = sorted({*wanted, *transitive})
    if not names:
        return
    # Three statements whatever the number of names: the missing rows in one insert (a
    # concurrent insert of the same name is ignored), all of them locked in name order by
    # one query, then every request written by one upsert.
    Package.objects.bulk_create([Package(name=name) for name in names], ignore_conflicts=True)
    packages = list(Package.objects.select_for_update().filter(name__in=names).order_by("name"))
    PackageRequest.objects.bulk_create(
        [
            PackageRequest(
                package=package, revision_id=revision_id,
                specifier=wanted.get(package.name, transitive.get(package.name, "")),
                transitive=package.name in transitive,
                import_name=sites[package.name][0] if package.name in sites else "",
                import_line=sites[package.name][1] if package.name in sites else None,
                optional=package.name in optional,
            )
            for package in packages
        ],
        update_conflicts=True, unique_fields=["package", "revision"],
        update_fields=["specifier", "transitive", "import_name", "import_line", "optional"],
    )


def request_decisions(*, revision_id: int) -> tuple[list[tuple[str, str]], list[str]]:
    """The packages holding a revision back: (rejected names with their reasons, pending
    names), each sorted. Names found only in a lock count while TOOLHUB_APPROVE_TRANSITIVE is on."""
    # An optional package never holds a revision back, whatever was decided about it.
    requests = PackageRequest.objects.filter(revision_id=revision_id, optional=False)
    if not settings.TOOLHUB_APPROVE_TRANSITIVE:
        # Names found only in a lock hold nothing back once the setting is off again.
        requests = requests.filter(transitive=False)
    rows = list(requests.values_list("package__name", "package__status", "package__reason"))
    rejected = sorted((n, reason) for n, status, reason in rows if status == Approval.REJECTED)
    pending = sorted(n for n, status, _reason in rows if status == Approval.PENDING)
    return rejected, pending


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def import_mappings() -> dict[str, str]:
    """The admins' import -> distribution mappings."""
    return dict(ImportMapping.objects.values_list("module", "distribution"))


def mapping_record(*, module: str, distribution: str, user: User) -> str:
    """Remember that `import <module>` comes from `distribution`; returns its canonical name."""
    module = module.strip()
    if not _MODULE.fullmatch(module) or len(module) > 200:
        raise InvalidPackageName(_("%(module)s is not a top-level module name.") % {"module": repr(module[:80])})
    name = validate_name(distribution)
    ImportMapping.objects.update_or_create(module=module, defaults={"distribution": name, "set_by": user, "set_at": timezone.now()})
    return name


def forget_unrequested(names: Iterable[str]) -> None:
    """Drop pending packages that no revision asks for any more (after a remap)."""
    Package.objects.filter(name__in=list(names), status=Approval.PENDING, requests__isnull=True, decisions__isnull=True).delete()


def unapproved_names(names: Iterable[str]) -> set[str]:
    names = set(names)
    return names - set(Package.objects.filter(name__in=names, status=Approval.APPROVED).values_list("name", flat=True))


def _locked_package(name: str) -> Package:
    package, _created = Package.objects.select_for_update().get_or_create(name=name)
    return package


def decisions_record(
    *, names: Iterable[str], status: str, user: User, constraint: str = "", reason: str = "", source_build: bool = False
) -> list[Package]:
    """Record one decision for each (already validated) name and return the packages, locked
    in name order; `source_build` (approvals only) lets the packages be built from source. The
    lifecycle calls this inside the transaction in which it then moves the revisions that
    waited on them (toolhub.toolkits.lifecycle.packages_decide)."""
    now = timezone.now()
    packages = []
    for name in sorted(set(names)):
        package = _locked_package(name)
        package.status = status
        package.constraint = constraint
        package.source_build = source_build and status == Approval.APPROVED
        package.reason = reason
        package.reviewed_by = user
        package.reviewed_at = now
        package.save()
        Decision.objects.create(
            package=package, status=status, constraint=constraint, source_build=package.source_build,
            reason=reason, decided_by=user, decided_at=now,
        )
        packages.append(package)
    return packages


def clean_constraint(constraint: str) -> str:
    constraint = constraint.strip()
    limit = Package._meta.get_field("constraint").max_length or 200
    if len(constraint) > limit:
        raise InvalidConstraint(_("A constraint has at most %(limit)s characters.") % {"limit": limit})
    if constraint:
        try:
            SpecifierSet(constraint)
        except InvalidSpecifier as exc:
            raise InvalidConstraint(
                _("%(constraint)s is not a version specifier (e.g. >=2,<3).") % {"constraint": repr(constraint)}
            ) from exc
    return constraint


def clean_approval(*, names: Iterable[str], constraint: str = "", unknown_confirmed: Iterable[str] = ()) -> tuple[list[str], str]:
    """Check an approval before anything changes: the names in PEP 503 form, the constraint,
    and no name the index does not know unless it is in `unknown_confirmed` (a typo or a
    squatted name is not approved by accident)."""
    cleaned, constraint = [validate_name(name) for name in names], clean_constraint(constraint)
    confirmed = {normalise(name) for name in unknown_confirmed}
    unknown = sorted(
        Package.objects.filter(name__in=cleaned, index_state=IndexState.MISSING).exclude(name__in=confirmed)
        .values_list("name", flat=True)
    )
    if unknown:
        raise NotOnIndex(ngettext(
            "%(names)s is not on the package index; confirm that you approve it anyway to approve it.",
            "%(names)s are not on the package index; confirm that you approve them anyway to approve them.",
            len(unknown),
        ) % {"names": ", ".join(unknown)})
    _require_index_answers(cleaned, confirmed)
    return cleaned, constraint


def _require_index_answers(names: list[str], confirmed: set[str]) -> None:
    """Refuse to approve a name the index check has not answered about yet (the check is
    asked for again when no worker is on it), unless confirmed: an unknown name must not be
    approved without its warning just because the admin was quicker than the check."""
    if not index_checks.enabled():
        return
    rows = list(
        Package.objects.filter(name__in=names, index_state__in=[IndexState.UNCHECKED, IndexState.CHECKING])
        .exclude(name__in=confirmed).only("name", "index_state", "index_requested_at", "index_checked_at")
    )
    if not rows:
        return
    index_checks.queue_checks(rows)
    waiting = sorted(package.name for package in rows)
    raise IndexNotAnswered(ngettext(
        "The package index has not answered about %(names)s yet; approve again in a moment, or confirm that you"
        " approve it without waiting.",
        "The package index has not answered about %(names)s yet; approve again in a moment, or confirm that you"
        " approve them without waiting.",
        len(waiting),
    ) % {"names": ", ".join(waiting)})


def clean_rejection(*, names: Iterable[str], reason: str) -> tuple[list[str], str]:
    """Check a rejection before anything changes; the reason is shown to the toolkits' authors."""
    reason = reason.strip()
    if not reason:
        raise MissingReason(_("Give a reason for rejecting; the toolkit's author will see it."))
    if len(reason) > MAX_REASON_CHARS:
        raise MissingReason(_("A reason has at most %(limit)s characters.") % {"limit": f"{MAX_REASON_CHARS:,}"})
    return [validate_name(name) for name in names], reason


def approved_constraints() -> list[str]:
    """The constraints admins attached to approvals, as pip-compile `-c` lines."""
    return [f"{p.name}{p.constraint}" for p in Package.objects.filter(status=Approval.APPROVED).exclude(constraint="")]
