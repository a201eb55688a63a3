"""Reads of toolkits, shaped for pages and the API."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404

from toolhub.accounts.roles import can_manage_toolkit
from toolhub.toolkits.access import toolkit_to_call, toolkit_usable_by, usable_filter
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


def get_toolkit_to_manage(*, user, slug: str, refusal: str) -> Toolkit:
    """get_toolkit_for_user for changing the toolkit: its owner and admins get it, anyone else
    who may use it is refused with `refusal` (403), everyone else gets 404."""
    toolkit = get_toolkit_for_user(user=user, slug=slug)
    if not can_manage_toolkit(user, toolkit):
        raise PermissionDenied(refusal)
    return toolkit


def get_toolkit_to_call(*, user, slug: str) -> Toolkit:
    """get_toolkit_for_user for calling one of its tools (toolhub.toolkits.access.toolkit_to_call):
    the same 404s, fewer columns read."""
    toolkit = toolkit_to_call(user, slug)
    if toolkit is None:
        raise Http404
    return toolkit


# Lines of the two sources that difflib matches against each other, at the most (after their
# common start and end). Its matching grows with the square of the lines that differ, and a
# source holds up to 512 KiB of them: two revisions of 16,000 alternating lines took it 30 s.
MAX_DIFF_LINES = 2000


def revision_diff(*, a: Revision, b: Revision) -> list[tuple[str, str]]:
    """A unified line diff as (css class, line) pairs. Where the sources differ in more than
    MAX_DIFF_LINES lines, every line between their common start and end shows as removed and
    added (still a correct diff, with one hunk)."""
    old, new = a.source.splitlines(), b.source.splitlines()
    fromfile, tofile = f"revision {a.number}", f"revision {b.number}"
    head = _common_length(old, new)
    tail = _common_length(old[head:][::-1], new[head:][::-1])
    if max(len(old), len(new)) - head - tail > MAX_DIFF_LINES:
        lines = _one_hunk(old, new, head, tail, fromfile, tofile)
    else:
        lines = difflib.unified_diff(old, new, fromfile=fromfile, tofile=tofile, lineterm="", n=3)
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


def _common_length(a: list[str], b: list[str]) -> int:
    """How many lines `a` and `b` start with in common."""
    for n, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return n
    return min(len(a), len(b))


def _one_hunk(
    old: list[str], new: list[str], head: int, tail: int, fromfile: str, tofile: str, n: int = 3,
) -> Iterator[str]:
    """The unified diff that removes the lines of `old` between its first `head` and last
    `tail` lines and adds those of `new`, with `n` lines of context either side."""
    start, after = max(head - n, 0), min(tail, n)
    old_end, new_end = len(old) - tail, len(new) - tail

    def span(first: int, stop: int) -> str:
        # difflib's numbering: 1-based, an empty range named by the line before it.
        if stop - first == 1:
            return str(first + 1)
        return f"{first + 1 if stop > first else first},{stop - first}"

    yield f"--- {fromfile}"
    yield f"+++ {tofile}"
    yield f"@@ -{span(start, old_end + after)} +{span(start, new_end + after)} @@"
    yield from (" " + line for line in old[start:head])
    yield from ("-" + line for line in old[head:old_end])
    yield from ("+" + line for line in new[head:new_end])
    yield from (" " + line for line in old[old_end:old_end + after])


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
