"""Toolkits taken out of ToolHub: one revision's `.py`, and toolkits as the JSON that Open
WebUI's Tools workspace exports (a list of tool objects), which `bulk.import_export` reads
back (an entry's `id` is the slug, its `content` the source) and Open WebUI imports too."""

from __future__ import annotations

from django.db.models import QuerySet

from toolhub.toolkits.bulk import MAX_EXPORT_ENTRIES
from toolhub.toolkits.models import Revision, Toolkit
from toolhub.toolkits.selectors import toolkit_list

__all__ = ["MAX_EXPORT_ENTRIES", "export_entry", "exportable", "revision_filename"]


def revision_filename(revision: Revision) -> str:
    return f"{revision.toolkit.slug}-r{revision.number}.py"


def exported_revision(toolkit: Toolkit) -> Revision | None:
    """What an export holds of a toolkit: the revision it serves, else its newest one."""
    return toolkit.current_revision or toolkit.latest_revision()


def export_entry(toolkit: Toolkit, revision: Revision) -> dict:
    """One tool object as Open WebUI writes it: `specs` are the tool specs ToolHub found
    (empty until the revision was introspected), times in epoch seconds."""
    return {
        "id": toolkit.slug,
        "name": revision.title or toolkit.title,
        "content": revision.source,
        "specs": revision.tools or [],
        "meta": {"description": revision.description, "manifest": revision.manifest or {}},
        "access_control": None,
        "created_at": int(toolkit.created_at.timestamp()),
        "updated_at": int(revision.created_at.timestamp()),
    }


def exportable(*, user, slugs: list[str]) -> QuerySet[Toolkit]:
    """The toolkits among `slugs` that `user` may see, with the revision to export (its source
    included, unlike lists)."""
    return toolkit_list(user=user).filter(slug__in=slugs[:MAX_EXPORT_ENTRIES]).select_related(None).select_related(
        "current_revision", "owner"
    ).defer(None)
