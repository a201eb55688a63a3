"""Writes to toolkits and their revisions. Views, the API and commands call these; none of
them imports or runs the uploaded code (the checks are static, see toolhub.toolkits.source_checks)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from toolhub.accounts.roles import can_manage_toolkit
from toolhub.packages import index_checks
from toolhub.packages import services as packages
from toolhub.packages.environments import environment_package_names
from toolhub.packages.top_level import top_level_modules
from toolhub.sandbox.egress.rules import HostPatternRefused, validate_host_pattern
from toolhub.toolkits import lifecycle
from toolhub.toolkits.access import toolkits_usable_by
from toolhub.toolkits.models import Review, Revision, Status, Toolkit
from toolhub.toolkits.source_checks import (
    ParsedToolkit,
    SourceError,
    ToolkitSourceInvalid,
    parse_toolkit_source,
    slugify,
)

SLUG_MAX = 64
# Slugs that name a page instead of a toolkit: /toolkits/new/ is the upload page, /toolkits/export/
# the export of a selection.
RESERVED_SLUGS = frozenset({"new", "export"})


class SlugTaken(ToolkitSourceInvalid):
    """Another toolkit has the slug (the API answers 409). `free` is a slug that is not
    taken (`slug_2`, `slug_3`, ...); `derived` is true when the slug came from the title or
    file name rather than from the uploader, so the page can offer both ways out."""

    def __init__(self, slug: str, *, free: str | None = None, derived: bool = False, hidden: bool = False) -> None:
        self.slug, self.free, self.derived, self.hidden = slug, free, derived, hidden
        if hidden and free:
            message = _("The slug %(slug)s is not available; choose another slug, such as %(free)s.")
        elif hidden:
            message = _("The slug %(slug)s is not available; choose another slug.")
        elif free:
            message = _("A toolkit with the slug %(slug)s exists already; choose another slug, such as %(free)s.")
        else:
            message = _("A toolkit with the slug %(slug)s exists already; choose another slug.")
        message %= {"slug": repr(slug), "free": repr(free)}
        super().__init__([SourceError(message=message, field="slug", code="slug_taken")])


# How many numbered slugs `free_slug` tries before it gives up.
FREE_SLUG_TRIES = 1000


def free_slug(base: str) -> str | None:
    """The first of `base_2`, `base_3`, ... that no toolkit has (cut to fit SLUG_MAX)."""
    stem = base[: SLUG_MAX - len(f"_{FREE_SLUG_TRIES}")].rstrip("_") or "toolkit"
    taken = set(Toolkit.objects.filter(slug__startswith=stem).values_list("slug", flat=True))
    for number in range(2, FREE_SLUG_TRIES + 1):
        candidate = f"{base[: SLUG_MAX - len(f'_{number}')].rstrip('_') or 'toolkit'}_{number}"
        if candidate not in taken and candidate not in RESERVED_SLUGS:
            return candidate
    return None


def slug_taken(slug: str, *, user: User, derived: bool = False) -> SlugTaken:
    """The refusal of a slug that a toolkit has. To someone who may not see every toolkit it
    says no more than "not available" and suggests a free slug that reveals nothing (a random
    suffix, not the next free number, which would count the hidden toolkit's siblings), so
    that the answer is the same whether the hidden toolkit exists or the name is merely
    unavailable. Whoever may see the toolkit gets the next free numbered slug."""
    if toolkits_usable_by(user).filter(slug=slug).exists():
        return SlugTaken(slug, free=free_slug(slug), derived=derived)
    return SlugTaken(slug, free=unrevealing_slug(slug), derived=derived, hidden=True)


def unrevealing_slug(base: str) -> str | None:
    """`base_` and a random suffix that no toolkit has (None after a few unlucky draws)."""
    for _attempt in range(5):
        suffix = secrets.token_hex(3)
        candidate = f"{base[: SLUG_MAX - len(suffix) - 1].rstrip('_') or 'toolkit'}_{suffix}"
        if not Toolkit.objects.filter(slug=candidate).exists():
            return candidate
    return None


@dataclass(frozen=True)
class UploadResult:
    toolkit: Toolkit
    revision: Revision
    created: bool  # False when identical source was uploaded again


def _slug_error(message: str) -> ToolkitSourceInvalid:
    exc = ToolkitSourceInvalid([SourceError(message=message, field="slug")])
    return exc


def validate_slug(slug: str) -> str:
    cleaned = slugify(slug)
    if not slug or cleaned != slug or len(slug) > SLUG_MAX:
        raise _slug_error(
            _("The slug %(slug)s is not valid: use 1 to %(limit)s lowercase letters, digits and underscores.")
            % {"slug": repr(slug), "limit": SLUG_MAX}
        )
    _check_not_reserved(slug)
    return slug


def _check_not_reserved(slug: str) -> None:
    if slug in RESERVED_SLUGS:
        raise _slug_error(
            _("The slug %(slug)s is reserved for a page of ToolHub; choose another slug.") % {"slug": repr(slug)}
        )


def _check_lengths(parsed: ParsedToolkit) -> None:
    """Refuse frontmatter values longer than their columns: PostgreSQL would fail the
    insert with a server error, and SQLite would quietly keep the overlong value."""
    limits = {
        "title": Revision._meta.get_field("title").max_length,
        "author": Toolkit._meta.get_field("author").max_length,
        "version": Revision._meta.get_field("version").max_length,
    }
    errors = []
    for key, limit in limits.items():
        value = getattr(parsed, key)
        if limit is not None and len(value) > limit:
            line = parsed.manifest_lines.get(key)
            if line:
                message = ngettext(
                    "The %(key)s on line %(line)s is %(count)s character long; ToolHub keeps at most %(limit)s.",
                    "The %(key)s on line %(line)s is %(count)s characters long; ToolHub keeps at most %(limit)s.",
                    len(value),
                )
            else:
                message = ngettext(
                    "The %(key)s is %(count)s character long; ToolHub keeps at most %(limit)s.",
                    "The %(key)s is %(count)s characters long; ToolHub keeps at most %(limit)s.",
                    len(value),
                )
            message %= {"key": key, "line": line, "count": len(value), "limit": limit}
            errors.append(SourceError(message=message, line=line, code="too_long"))
    if errors:
        raise ToolkitSourceInvalid(errors)


def _parse(source: bytes | str, filename: str | None) -> ParsedToolkit:
    parsed = parse_toolkit_source(source, filename=filename)
    _check_lengths(parsed)
    return parsed


def _requirements(parsed: ParsedToolkit) -> list[dict[str, Any]]:
    """The declared requirements, then those inferred from imports (marked `inferred` with
    the import and its line); both go through the same approval. An import of a package that
    TOOLHUB_ENVIRONMENT_PACKAGES gives every environment asks for nothing."""
    provided = environment_package_names()
    declared: list[dict[str, Any]] = [{"name": r.name, "specifier": r.specifier, "text": r.text} for r in parsed.requirements]
    mappings = packages.import_mappings()
    guessed = [r for r in parsed.infer_requirements(mappings) if r.name not in provided]
    optional = [r for r in parsed.optional_requirements(mappings) if r.name not in provided]
    if (guessed or optional) and parsed.requirements:
        # A declared distribution whose local wheel provides the module wins over the table.
        modules = top_level_modules([r.name for r in parsed.requirements], index_checks.local_places())
        guessed = [r for r in guessed if r.module not in modules]
        optional = [r for r in optional if r.module not in modules]
    inferred: list[dict[str, Any]] = [
        {"name": r.name, "specifier": "", "text": r.name, "inferred": {"module": r.module, "line": r.line}}
        for r in guessed
    ]
    # Imports under `try`/`except ImportError`: offered to admins, never holding the build back.
    offered: list[dict[str, Any]] = [
        {"name": r.name, "specifier": "", "text": r.name, "inferred": {"module": r.module, "line": r.line}, "optional": True}
        for r in optional
    ]
    return declared + inferred + offered


def _new_revision(*, toolkit: Toolkit, parsed: ParsedToolkit, user: User, number: int, imported: bool) -> Revision:
    return Revision.objects.create(
        toolkit=toolkit,
        number=number,
        source=parsed.source,
        sha256=parsed.sha256,
        kind=parsed.kind,
        version=parsed.version,
        title=parsed.title,
        description=parsed.description,
        manifest=parsed.manifest,
        requirements=_requirements(parsed),
        tool_names=parsed.tool_names,
        has_valves=parsed.has_valves,
        has_user_valves=parsed.has_user_valves,
        imports=parsed.imports,
        hosts=parsed.hosts,
        uploaded_by=user,
        imported=imported,
    )


def toolkit_create(
    *, source: bytes | str, user: User, slug: str | None = None, filename: str | None = None, imported: bool = False,
) -> UploadResult:
    """Check the source and create a toolkit with its first revision. Raises
    ToolkitSourceInvalid (with every problem found) and stores nothing on error. `imported`:
    the code came in through an import, not from the uploader's own hand (Revision.imported)."""
    parsed = _parse(source, filename)
    derived = not slug
    if slug:
        validate_slug(slug)
    else:
        slug = parsed.suggested_slug
        _check_not_reserved(slug)
    if Toolkit.objects.filter(slug=slug).exists():
        raise slug_taken(slug, user=user, derived=derived)
    try:
        with transaction.atomic():
            toolkit = Toolkit.objects.create(slug=slug, owner=user, title=parsed.title, author=parsed.manifest.get("author", ""))
            revision = _new_revision(toolkit=toolkit, parsed=parsed, user=user, number=1, imported=imported)
            lifecycle.uploaded(toolkit=toolkit, revision=revision)
    except IntegrityError as exc:
        # Two uploads raced for the same slug.
        raise slug_taken(slug, user=user, derived=derived) from exc
    return UploadResult(toolkit=toolkit, revision=revision, created=True)


def revision_upload(
    *, toolkit: Toolkit, source: bytes | str, user: User, filename: str | None = None, imported: bool = False,
) -> UploadResult:
    """Add a revision to an existing toolkit. Identical source adds nothing and returns the
    revision that already holds it."""
    parsed = _parse(source, filename)
    with transaction.atomic():
        toolkit = Toolkit.objects.select_for_update().get(pk=toolkit.pk)
        latest = toolkit.revisions.order_by("-number").first()
        same = toolkit.revisions.filter(sha256=parsed.sha256).order_by("-number").first()
        if same is not None and latest is not None and same.pk == latest.pk:
            return UploadResult(toolkit=toolkit, revision=same, created=False)
        revision = _new_revision(
            toolkit=toolkit, parsed=parsed, user=user, number=(latest.number + 1) if latest else 1, imported=imported
        )
        lifecycle.uploaded(toolkit=toolkit, revision=revision)
    return UploadResult(toolkit=toolkit, revision=revision, created=True)


class RevisionAwaitingReview(ToolkitSourceInvalid):
    """A rollback to a revision that awaits an admin's review (the API answers 409)."""

    def __init__(self, number: int) -> None:
        message = _("Revision %(number)s awaits an admin's review; it becomes current once approved.") % {
            "number": number
        }
        super().__init__([SourceError(message=message, field="revision")])


class RevisionRefused(ToolkitSourceInvalid):
    """A rollback to a revision that may not serve (the API answers 409)."""

    def __init__(self, message: str) -> None:
        super().__init__([SourceError(message=message, field="revision")])


def toolkit_rollback(*, toolkit: Toolkit, number: int) -> Revision:
    """Make revision `number` current again. Refused for a revision that awaits review, that
    was rejected (in review or for its packages: it never becomes ready), or that an admin never
    reviewed although the toolkit now holds what review protects (secret Valves an admin set,
    an egress grant): rollback is no path around review."""
    revision = toolkit.revisions.filter(number=number).first()
    if revision is None:
        raise ToolkitSourceInvalid([SourceError(message=_("Revision %(number)s does not exist.") % {"number": number}, field="revision")])
    if revision.status == Status.AWAITING_REVIEW:
        raise RevisionAwaitingReview(number)
    if revision.status == Status.REJECTED or revision.review == Review.REJECTED:
        raise RevisionRefused(_("Revision %(number)s was rejected; it cannot become current. Upload a new revision instead.") % {"number": number})
    if lifecycle.review_needed(revision):
        raise RevisionRefused(_(
            "Revision %(number)s was never reviewed by an admin, and this toolkit now holds secret Valves or a network "
            "grant; upload it again to have it reviewed."
        ) % {"number": number})
    lifecycle.rollback(toolkit=toolkit, revision=revision)
    return revision


class InvalidEgressHosts(ValueError):
    pass


def toolkit_set_egress(*, toolkit: Toolkit, granted: bool, hosts: list[str], by: User) -> Toolkit:
    """Grant or withdraw network egress. `hosts` limits it to names or `*.domain` patterns;
    an empty list means any public host. Loopback and private addresses stay refused."""
    cleaned = []
    # Withdrawing forgets the allowlist, so whatever else the form held does not matter.
    for raw in hosts if granted else []:
        raw = raw.strip()
        if not raw:
            continue
        try:
            cleaned.append(validate_host_pattern(raw))
        except HostPatternRefused as exc:
            # The rule's message already quotes the entry.
            raise InvalidEgressHosts(exc.message.render(_)) from None
    toolkit.egress_granted = granted
    toolkit.egress_hosts = sorted(set(cleaned)) if granted else []
    toolkit.egress_granted_by = by if granted else None
    toolkit.egress_granted_at = timezone.now() if granted else None
    # Granting (or updating) confirms the grant for the current code; withdrawing forgets it.
    toolkit.egress_held_hosts = []
    toolkit.save(update_fields=["egress_granted", "egress_hosts", "egress_granted_by", "egress_granted_at", "egress_held_hosts"])
    if granted:
        toolkit.entrust_current_revision(by)
    return toolkit


def toolkit_delete(*, toolkit: Toolkit) -> None:
    with transaction.atomic():
        Toolkit.objects.filter(pk=toolkit.pk).update(current_revision=None)
        toolkit.delete()


def toolkit_clone(*, revision: Revision, user: User, slug: str | None = None) -> UploadResult:
    """A new toolkit owned by `user` whose first revision is `revision`'s source, under
    `slug` (else a free slug after the original's: `echo_2`). It goes through every check
    and build of an upload; nothing else is copied (no Valves, access or egress grant). The
    code is the cloner's own only when they may manage the original and it was no import:
    else it is stored as imported and waits for an admin's review like any import."""
    original = revision.toolkit
    mine = can_manage_toolkit(user, original) and not revision.imported
    chosen = slug or unrevealing_slug(original.slug)
    if not chosen:
        raise _slug_error(_("Choose a slug for the copy."))
    return toolkit_create(
        source=revision.source, user=user, slug=chosen, filename=f"{chosen}.py", imported=not mine,
    )
