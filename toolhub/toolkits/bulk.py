"""Many toolkits at once: a folder of files (`manage.py import_toolkits PATH`) and the JSON
that Open WebUI's Tools workspace exports. Both go through the same services as one upload
(`toolkit_create`, `revision_upload`), so every check applies, and both are safe to repeat:
a source that is already the newest revision of its toolkit adds nothing.

A folder is imported file by file, each file on its own (as RAGFlow loads its plugin folder):
a broken file is refused and the others still load. An export is imported whole or not at
all: if any entry is refused, nothing is stored, and every entry says what happened to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from toolhub.accounts.roles import can_manage_toolkit
from toolhub.toolkits import lifecycle, services
from toolhub.toolkits.models import Toolkit
from toolhub.toolkits.source_checks import MAX_SOURCE_BYTES, ToolkitSourceInvalid, slugify

# An export holds at most this many entries and bytes (each source is also held to 512 KiB).
MAX_EXPORT_ENTRIES = 200
MAX_EXPORT_BYTES = 20 * 1024 * 1024
# A folder import reads at most this many files.
MAX_FOLDER_FILES = 5000

LOADED, UNCHANGED, REFUSED, NOT_IMPORTED = "loaded", "unchanged", "refused", "not_imported"


@dataclass(frozen=True)
class Verdict:
    """What happened to one file or export entry. `name` is the file's path relative to
    the folder, or the entry's `id`; `error` the first problem (with `line` when it has one)."""

    name: str
    outcome: str
    slug: str | None = None
    revision: int | None = None
    tools: int = 0
    error: str = ""
    line: int | None = None
    # For a new revision of a toolkit someone else owns: whose it is, and whether it waits for
    # an admin's review before it serves (imported code is never the importer's own).
    owner: str | None = None
    review: str = ""

    def log_line(self) -> str:
        if self.outcome in (LOADED, UNCHANGED):
            verb = "Loaded" if self.outcome == LOADED else "Unchanged"
            line = f"{verb} toolkit {self.slug} revision {self.revision} ({self.tools} tools)"
            if self.owner:
                line += f": a new revision of {self.slug} (owner {self.owner})"
            if self.review:
                line += f", waits for an admin's review (it would receive {self.review})"
            return line
        where = f"line {self.line}: " if self.line else ""
        return f"Refused {self.name}: {where}{self.error}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "outcome": self.outcome, "slug": self.slug, "revision": self.revision,
            "tools": self.tools, "error": self.error or None, "line": self.line,
            "owner": self.owner, "waits_for_review": bool(self.review), "review": self.review or None,
        }


class ExportInvalid(ValueError):
    """The upload is not an Open WebUI export at all (nothing was looked at further)."""


def _refused(name: str, exc: ToolkitSourceInvalid, slug: str | None = None) -> Verdict:
    first = exc.errors[0] if exc.errors else None
    return Verdict(name, REFUSED, slug=slug, error=first.message if first else str(exc), line=first.line if first else None)


def _store(*, name: str, source: str | bytes, slug: str, user, filename: str, may_revise) -> Verdict:
    """Create the toolkit `slug`, or add a revision to it when it exists and `may_revise`.
    The code is stored as imported: it is reviewed like an author's upload, whoever imports it."""
    existing = Toolkit.objects.select_related("owner").filter(slug=slug).first()
    try:
        if existing is None:
            result = services.toolkit_create(source=source, user=user, slug=slug, filename=filename, imported=True)
        elif may_revise(existing):
            result = services.revision_upload(toolkit=existing, source=source, user=user, filename=filename, imported=True)
        else:
            raise services.slug_taken(slug, user=user)
    except ToolkitSourceInvalid as exc:
        return _refused(name, exc, slug)
    revision = result.revision
    outcome = LOADED if result.created else UNCHANGED
    owner = existing.owner if existing is not None and existing.owner_id != getattr(user, "pk", None) else None
    return Verdict(
        name, outcome, slug=slug, revision=revision.number, tools=len(revision.tool_names),
        owner=owner.get_username() if owner is not None else None,
        review=str(lifecycle.review_needed(revision) or "") if result.created and existing is not None else "",
    )


# -- A folder ----------------------------------------------------------------------------------


def folder_files(root: Path) -> list[Path]:
    """Every `.py` file below root (or root itself), sorted, skipping hidden folders and caches."""
    if root.is_file():
        return [root]
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(part.startswith(".") or part == "__pycache__" for part in parts) or not path.is_file():
            continue
        files.append(path)
        if len(files) > MAX_FOLDER_FILES:
            raise ValueError(f"{root} has more than {MAX_FOLDER_FILES} Python files")
    return files


def _folder_slugs(root: Path, files: list[Path]) -> dict[Path, str]:
    """The file's stem as slug (`web_scrape.py` → `web_scrape`); when two files share a stem,
    those after the first take their path below root (`search/web_scrape.py` →
    `search_web_scrape`). Sorted order makes this the same on every run."""
    slugs: dict[Path, str] = {}
    used: set[str] = set()
    base = root if root.is_dir() else root.parent
    for path in files:
        slug = slugify(path.stem)
        if slug in used:
            slug = slugify("_".join(path.relative_to(base).with_suffix("").parts))
        used.add(slug)
        slugs[path] = slug
    return slugs


def import_folder(root: Path, *, user) -> Iterable[Verdict]:
    """Import each file below root, yielding one verdict per file as it is done."""
    files = folder_files(root)
    slugs = _folder_slugs(root, files)
    base = root if root.is_dir() else root.parent
    for path in files:
        name = str(path.relative_to(base))
        if path.stat().st_size > MAX_SOURCE_BYTES:
            size = path.stat().st_size
            yield Verdict(name, REFUSED, error=f"The file is {size:,} bytes; the limit is 512 KiB ({MAX_SOURCE_BYTES:,} bytes).")
            continue
        yield _store(
            name=name, source=path.read_bytes(), slug=slugs[path], user=user, filename=path.name,
            may_revise=lambda toolkit: True,
        )


# -- An Open WebUI export --------------------------------------------------------------------


def parse_export(data: bytes | str) -> list[dict[str, Any]]:
    """The entries of an export: a JSON list of tool objects (one object is taken as a list
    of one). Raises ExportInvalid with the reason."""
    size = len(data.encode() if isinstance(data, str) else data)
    if size > MAX_EXPORT_BYTES:
        raise ExportInvalid(f"The export is {size:,} bytes; the limit is {MAX_EXPORT_BYTES // (1024 * 1024)} MiB.")
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ExportInvalid(f"The export is not JSON: {exc}.") from None
    entries = [parsed] if isinstance(parsed, dict) else parsed
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ExportInvalid("An Open WebUI export is a JSON list of tools, each an object with `id` and `content`.")
    if not entries:
        raise ExportInvalid("The export has no tools.")
    if len(entries) > MAX_EXPORT_ENTRIES:
        raise ExportInvalid(f"The export has {len(entries)} tools; at most {MAX_EXPORT_ENTRIES} are imported at once.")
    return entries


def _entry_problem(entry: dict[str, Any]) -> str:
    if not isinstance(entry.get("id"), str) or not entry["id"]:
        return "The entry has no `id`."
    if not isinstance(entry.get("content"), str) or not entry["content"].strip():
        return "The entry has no `content` (the toolkit's source)."
    if entry.get("name") is not None and not isinstance(entry["name"], str):
        return "The entry's `name` is not text."
    return ""


def import_export(data: bytes | str, *, user) -> tuple[bool, list[Verdict]]:
    """Import every entry of an export as a toolkit whose slug is the entry's `id`, in one
    transaction: when any entry is refused, nothing is stored and the entries that would have
    been imported say `not_imported`. An `id` that is already a toolkit the user may manage
    gets a new revision (or nothing, when the source is the same); one the user may not
    manage, or an `id` given twice, is refused. Returns (imported, verdicts)."""
    entries = parse_export(data)
    verdicts: list[Verdict] = []
    seen: dict[str, int] = {}
    with transaction.atomic():
        for number, entry in enumerate(entries, start=1):
            name = entry["id"] if isinstance(entry.get("id"), str) and entry["id"] else f"#{number}"
            problem = _entry_problem(entry)
            if problem:
                verdicts.append(Verdict(name[:100], REFUSED, error=problem))
                continue
            slug = entry["id"]
            if slug in seen:
                verdicts.append(Verdict(slug[:100], REFUSED, error=f"The id {slug!r} is also entry {seen[slug]}; ids must be unique."))
                continue
            seen[slug] = number
            try:
                services.validate_slug(slug)
            except ToolkitSourceInvalid as exc:
                verdicts.append(_refused(slug[:100], exc))
                continue
            title = entry.get("name") or slug
            with transaction.atomic():
                verdicts.append(_store(
                    name=slug, source=entry["content"], slug=slug, user=user,
                    filename=f"{title}.py", may_revise=lambda toolkit: can_manage_toolkit(user, toolkit),
                ))
        imported = all(verdict.outcome != REFUSED for verdict in verdicts)
        if not imported:
            transaction.set_rollback(True)
            verdicts = [
                Verdict(v.name, NOT_IMPORTED, slug=v.slug) if v.outcome in (LOADED, UNCHANGED) else v for v in verdicts
            ]
    return imported, verdicts
