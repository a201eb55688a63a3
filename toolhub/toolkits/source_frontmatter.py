"""The frontmatter of an uploaded toolkit file and its `requirements:` line, read as text.

`openwebui_frontmatter` re-implements Open WebUI's `extract_frontmatter` rule by rule (first
`splitlines` line stripped must be exactly three double quotes; later lines are read until one
*contains* them; `^\\s*([a-z_]+):\\s*(.*)\\s*$`, case-insensitive, key case kept, value stripped,
last duplicate wins). `parse_frontmatter` reads the docstring body with the same rules, so both agree
on every file Open WebUI accepts; before the opening line it also skips a BOM, a shebang, comments and
blank lines, and it accepts `\'\'\'` (then a line containing `\'\'\'` ends it). Not accepted, on
purpose: text on the opening line and string prefixes (`r\"\"\"`), because a prose docstring such as
`\"\"\"Note: slow.\"\"\"` would turn into metadata.

`SourceError`, one problem found by any of the static checks, lives here because this is the
first of them; `toolhub.toolkits.source_checks` uses it for the rest. Messages are in the active
language (Django's gettext).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as _PackagingRequirement
from packaging.utils import canonicalize_name

# Counts and lengths a toolkit may not exceed: each requirement becomes a package row and
# a line in the admins' queue, and every name is stored in a column of this length.
MAX_REQUIREMENTS = 100
MAX_NAME_CHARS = 200
MAX_SPECIFIER_CHARS = 200
_KEY_LINE = re.compile(r"^\s*([a-z_]+):\s*(.*)\s*$", re.IGNORECASE)
_OPENERS = ('"""', "'''")
_URL_SCHEME = re.compile(r"^[a-z][a-z0-9+.\-]*://", re.IGNORECASE)
_PATH_START = re.compile(r"^(file:|[./\\]|~(?!=)|[a-z]:[\\/])", re.IGNORECASE)
_ARCHIVES = (".whl", ".zip", ".tar", ".gz", ".tgz", ".bz2", ".tbz", ".xz", ".txz")
_SPECIFIER_START = re.compile(r"^(===|==|!=|~=|<=|>=|<|>)")


@dataclass(frozen=True)
class SourceError:
    """One problem with an uploaded file; `line` and `column` are 1-based."""

    message: str
    line: int | None = None
    column: int | None = None
    field: str = "source"
    # A stable name of the check (such as "too_large") for the API and for tests.
    code: str = ""


@dataclass(frozen=True)
class Requirement:
    name: str
    specifier: str
    text: str
    line: int | None = None


@dataclass(frozen=True)
class FrontmatterEntry:
    key: str
    value: str
    line: int
    column: int  # Where the value starts.


# -- Frontmatter --------------------------------------------------------------------------


def openwebui_frontmatter(source: str) -> dict[str, str]:
    """Open WebUI's frontmatter reading, rule for rule: the reference of parity tests."""
    lines = source.splitlines()
    if not lines or lines[0].strip() != '"""':
        return {}
    result: dict[str, str] = {}
    for line in lines[1:]:
        if '"""' in line:
            break
        match = _KEY_LINE.match(line)
        if match:
            result[match.group(1).strip()] = match.group(2).strip()
    return result


def parse_frontmatter(source: str) -> dict[str, str]:
    """Open WebUI's rules, plus `'''` and a BOM, shebang or comments before the docstring."""
    return {entry.key: entry.value for entry in frontmatter_entries(source)}


def _pieces(source: str) -> list[tuple[str, int, int, bool]]:
    """Cut lines as `str.splitlines` does (like Open WebUI), keeping Python's real lines.

    `splitlines` also cuts at form feeds, `\\x1c`-`\\x1e`, NEL and U+2028/9, which end no
    line for Python or an editor. Each piece carries its real line, the column where it
    starts and whether it ends a real line, so errors point at the line a person sees.
    """
    pieces = []
    line, column = 1, 0
    for raw in source.splitlines(keepends=True):
        ends_line = raw.endswith(("\n", "\r"))
        pieces.append((raw.splitlines()[0], line, column, ends_line))
        line, column = (line + 1, 0) if ends_line else (line, column + len(raw))
    return pieces


def frontmatter_entries(source: str) -> list[FrontmatterEntry]:
    pieces = _pieces(source)
    start, in_comment = None, False
    for index, (text, _line, _column, ends_line) in enumerate(pieces):
        stripped = (text.removeprefix("\ufeff") if index == 0 else text).strip()
        if in_comment or stripped.startswith("#"):
            # A comment runs to the real end of its line, even past a form feed.
            in_comment = not ends_line
            continue
        if stripped:
            start = index if stripped in _OPENERS else None
            break
    if start is None:
        return []
    closer = pieces[start][0].strip()
    entries = []
    for text, line, column, _ends_line in pieces[start + 1 :]:
        if closer in text:
            break
        match = _KEY_LINE.match(text)
        if match:
            key, value = match.group(1).strip(), match.group(2).strip()
            entries.append(FrontmatterEntry(key, value, line, column + match.start(2) + 1))
    return entries


# -- Requirements -------------------------------------------------------------------------


def parse_requirements(entry: FrontmatterEntry, errors: list[SourceError]) -> list[Requirement]:
    requirements = []
    offset = 0
    for raw in entry.value.split(","):
        token = raw.strip()
        column = entry.column + offset + len(raw) - len(raw.lstrip())
        offset += len(raw) + 1
        if not token:
            # An empty token (from `a, b,` or an empty `requirements:`) asks for
            # nothing, so it is skipped rather than refused.
            continue
        problem, code = _requirement_problem(token)
        if problem:
            message = problem % {"token": token, "line": entry.line}
            errors.append(SourceError(message, entry.line, column, code=code))
            continue
        parsed = _PackagingRequirement(token)
        name, specifier = canonicalize_name(parsed.name), str(parsed.specifier)
        if len(name) > MAX_NAME_CHARS or len(specifier) > MAX_SPECIFIER_CHARS:
            shown = token if len(token) <= 60 else token[:57] + "..."
            if len(name) > MAX_NAME_CHARS:
                too_long = _("`%(token)s` in `requirements:` on line %(line)s has a name longer than %(limit)s characters.")
            else:
                too_long = _(
                    "`%(token)s` in `requirements:` on line %(line)s has a version specifier longer than %(limit)s"
                    " characters."
                )
            limit = MAX_NAME_CHARS if len(name) > MAX_NAME_CHARS else MAX_SPECIFIER_CHARS
            message = too_long % {"token": shown, "line": entry.line, "limit": limit}
            errors.append(SourceError(message, entry.line, column, code="requirement_too_long"))
            continue
        requirements.append(Requirement(name, specifier, str(parsed), entry.line))
    distinct = {r.name for r in requirements}
    if len(distinct) > MAX_REQUIREMENTS:
        message = ngettext(
            "`requirements:` on line %(line)s lists %(count)s package; a toolkit may ask for at most %(limit)s.",
            "`requirements:` on line %(line)s lists %(count)s packages; a toolkit may ask for at most %(limit)s.",
            len(distinct),
        ) % {"line": entry.line, "count": len(distinct), "limit": MAX_REQUIREMENTS}
        errors.append(SourceError(message, entry.line, entry.column, code="too_many_requirements"))
    return requirements


def _requirement_problem(token: str) -> tuple[str, str]:
    """Why a requirements token is refused (a message with `%(token)s` and `%(line)s` left to
    fill) and the error code, or two empty strings."""
    if token.startswith("-"):
        option = _(
            "`%(token)s` in `requirements:` on line %(line)s is a pip option, not a requirement. Indexes and other"
            " pip options are settings of ToolHub, never of a toolkit."
        )
        return option, "requirement_option"
    path = _(
        "`%(token)s` in `requirements:` on line %(line)s is a file path. List packages by name and version,"
        " such as `requests>=2`."
    )
    url = _(
        "`%(token)s` in `requirements:` on line %(line)s is a URL. List packages by name and version,"
        " such as `requests>=2`."
    )
    if _PATH_START.match(token):
        return path, "requirement_path"
    if _URL_SCHEME.match(token) or "://" in token:
        return url, "requirement_url"
    if token.lower().endswith(_ARCHIVES):
        return path, "requirement_path"
    try:
        parsed = _PackagingRequirement(token)
    except InvalidRequirement as exc:
        if "/" in token or "\\" in token:
            return path, "requirement_path"
        # packaging's own explanation stays as it wrote it; %-signs in it are kept literal.
        reason = str(exc).splitlines()[0].rstrip(".").replace("%", "%%")
        if _SPECIFIER_START.match(token):
            why = _(
                "`%(token)s` in `requirements:` on line %(line)s is not a valid requirement: %(reason)s."
                " Requirements are separated by commas, so a range like `>=4,<5` is cut in two; write it as one"
                " clause, such as `~=4.0`."
            )
        else:
            why = _("`%(token)s` in `requirements:` on line %(line)s is not a valid requirement: %(reason)s.")
        return why.replace("%(reason)s", reason), "requirement_invalid"
    if parsed.url:
        pointed = _(
            "`%(token)s` in `requirements:` on line %(line)s points at a URL (`%(url)s`). List packages by name"
            " and version, such as `requests>=2`."
        )
        return pointed.replace("%(url)s", parsed.url.replace("%", "%%")), "requirement_url"
    return "", ""
