"""Reads of toolkits, shaped for pages and the API."""

from __future__ import annotations

import difflib

from django.db.models import Q, QuerySet
from django.http import Http404

from toolhub.toolkits.access import toolkit_usable_by, usable_filter
from toolhub.toolkits.models import Revision, Status, Toolkit

# The big text columns of a revision that no list shows; leaving them out keeps a page of
# twenty toolkits from loading up to twenty 512 KiB sources.
_LIST_DEFERRED = [f"current_revision__{name}" for name in ("source", "build_log", "lock", "traceback")]


def toolkit_list(*, user, query: str = "", with_translations: bool = False) -> QuerySet[Toolkit]:
    """The toolkits `user` may use, by title. `with_translations` fetches every listed
    toolkit's translations in one more query, for pages that resolve `$t:` titles."""
    qs = Toolkit.objects.select_related("current_revision", "owner").defer(*_LIST_DEFERRED)
    condition = usable_filter(user)
    if condition is not None:
        qs = qs.filter(condition)
    if with_translations:
        qs = qs.prefetch_related("translations")
    if query:
        qs = qs.filter(Q(title__icontains=query) | Q(author__icontains=query) | Q(slug__icontains=query))
    return qs.order_by("title", "slug")


def owns_a_toolkit(*, user) -> bool:
    return user.is_authenticated and Toolkit.objects.filter(owner=user).exists()


def get_toolkit_for_user(*, user, slug: str) -> Toolkit:
    """The one way pages and endpoints fetch a toolkit: only one the user may use
    (toolhub.toolkits.access), else 404. What they may change is decided by
    toolhub.accounts.roles."""
    if not user.is_authenticated:
        raise Http404
    toolkit = toolkit_usable_by(user, slug)
    if toolkit is None:
        raise Http404
    return toolkit


def revision_diff(*, a: Revision, b: Revision) -> list[tuple[str, str]]:
    """A unified line diff as (css class, line) pairs."""
    lines = difflib.unified_diff(
        a.source.splitlines(), b.source.splitlines(),
        fromfile=f"revision {a.number}", tofile=f"revision {b.number}", lineterm="", n=3,
    )
    out = []
    for line in lines:
        if line.startswith(("+++", "---")):
            css = "file"
        elif line.startswith("@@"):
            css = "hunk"
        elif line.startswith("+"):
            css = "add"
        elif line.startswith("-"):
            css = "del"
        else:
            css = "ctx"
        out.append((css, line))
    return out


def revisions_awaiting_review() -> QuerySet[Revision]:
    """The admins' review queue, oldest first, with what each row shows."""
    return (
        Revision.objects.filter(status=Status.AWAITING_REVIEW)
        .select_related("toolkit", "toolkit__current_revision", "uploaded_by")
        .defer("build_log", "lock", "traceback", "toolkit__current_revision__build_log", "toolkit__current_revision__lock")
        .order_by("status_changed_at", "pk")
    )


def review_count() -> int:
    return Revision.objects.filter(status=Status.AWAITING_REVIEW).count()
