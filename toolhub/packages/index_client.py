"""What a package index says about one project, read the way pip reads it: the simple JSON
API (PEP 691) for the files and their upload times (PEP 700), and the core metadata file
next to a distribution (PEP 658/714) for its summary, licence and requirements. Works
against PyPI and any mirror that serves those (devpi, Artifactory, a static directory of
JSON files); an index that answers the older HTML form (PEP 503, also from a file:// directory
as pip reads it) gives what that form says, which has no upload times.

No Django: the index URLs, the target Python and the limits come in as arguments
(toolhub.packages.services passes the settings). Every answer is bounded in size and time,
and anything an index sends that is not what the PEPs describe ends in an `error`, never in
an exception.

`lookup(name, indexes=, python=, timeout=, cert=) -> IndexInfo`
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from datetime import datetime
from email.message import Message
from email.parser import BytesHeaderParser
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags, platform_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
SIMPLE_HTML = "application/vnd.pypi.simple.v1+html"
# A project page lists every file of every release: boto3's is ~2 MB on PyPI.
MAX_PAGE_BYTES = 16 * 1024 * 1024
MAX_METADATA_BYTES = 1024 * 1024
MAX_SUMMARY_CHARS = 300
MAX_LICENSE_CHARS = 100
MAX_VERSION_CHARS = 64
MAX_REQUIRES_SHOWN = 20
MAX_HTML_FILES = 20_000

# States of a lookup.
FOUND = "found"
MISSING = "missing"
ERROR = "error"

# Error codes (the page words them in the reader's language): `timeout`, `unreachable`,
# `status` (detail: the HTTP status), `not_json` (the index answered, not with PEP 691 JSON),
# `too_large`, `unreadable` (JSON that is not a PEP 691 project page).


@dataclass(frozen=True)
class IndexInfo:
    state: str
    # The index that answered (scheme, host and path; never credentials).
    index: str = ""
    version: str = ""
    # ISO 8601, from PEP 700 `upload-time`: the earliest upload of that version's files.
    released: str = ""
    summary: str = ""
    license: str = ""
    # A wheel of the latest version installs on the target Python (None: no files at all).
    wheel: bool | None = None
    # Requirements the latest version declares for the target Python (extras left out);
    # None when the index serves no metadata file for it.
    dependencies: int | None = None
    # Their names (the first MAX_REQUIRES_SHOWN, sorted).
    requires: tuple[str, ...] = ()
    error: str = ""
    error_detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


class _Failed(Exception):
    def __init__(self, code: str, detail: str = ""):
        super().__init__(code)
        self.code, self.detail = code, detail


class _NotFound(Exception):
    pass


def lookup(
    name: str, *, indexes: list[str], python: tuple[int, int], timeout: float = 10.0, cert: str | None = None,
) -> IndexInfo:
    """Ask each index in turn about `name`; the first that knows it answers. A name no index
    knows is `missing`; when an index could not be asked and none knew the name, `error`."""
    name = canonicalize_name(name)
    context = ssl.create_default_context(cafile=cert or None)
    failure: IndexInfo | None = None
    for index in indexes:
        shown = redact(index)
        deadline = time.monotonic() + timeout
        try:
            page, page_url = _project_page(index, name, context, deadline)
            return _describe(name, page, page_url, index, shown, python, context, deadline)
        except _NotFound:
            continue
        except _Failed as exc:
            failure = failure or IndexInfo(state=ERROR, index=shown, error=exc.code, error_detail=exc.detail)
    return failure or IndexInfo(state=MISSING, index=", ".join(redact(i) for i in indexes))


def redact(url: str) -> str:
    """The URL without user:password@ (an index URL may carry credentials)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _project_page(index: str, name: str, context: ssl.SSLContext, deadline: float) -> tuple[dict, str]:
    url = index.rstrip("/") + "/" + quote(name) + "/"
    try:
        body, content_type = _get(url, index, context, deadline, MAX_PAGE_BYTES, accept=SIMPLE_JSON)
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            raise _NotFound from None
        raise _Failed("status", str(exc.code)) from None
    if content_type in ("text/html", SIMPLE_HTML):
        # An index without PEP 691 answers HTML, which pip reads too (no upload times in it).
        return {"files": _html_files(body)}, url
    if content_type not in (SIMPLE_JSON, "application/json"):
        raise _Failed("not_json", content_type[:80])
    try:
        page = json.loads(body)
    except (ValueError, RecursionError):
        raise _Failed("unreadable") from None
    if not isinstance(page, dict) or not isinstance(page.get("files"), list):
        raise _Failed("unreadable")
    return page, url


class _Anchors(HTMLParser):
    """The files of a PEP 503 project page: each anchor's text, href and data- attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[dict] = []
        self._open: dict | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a" and len(self.files) < MAX_HTML_FILES:
            found = dict(attrs)
            href = found.get("href") or ""
            metadata = found.get("data-core-metadata", found.get("data-dist-info-metadata"))
            self._open = {
                "url": href, "filename": unquote(urlsplit(href).path.rsplit("/", 1)[-1]),
                "yanked": "data-yanked" in found,
                "core-metadata": _html_hash(metadata) if metadata is not None else False,
            }
            self.files.append(self._open)

    def handle_data(self, data: str) -> None:
        if self._open is not None and data.strip():
            self._open["filename"] = data.strip()

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._open = None


def _html_hash(value: str | None) -> dict | bool:
    # "sha256=<hex>" names the metadata file's hash; "true" only says there is one.
    name, _, digest = (value or "").partition("=")
    return {name: digest} if digest else value not in ("", "false")


def _html_files(body: bytes) -> list[dict]:
    parser = _Anchors()
    try:
        parser.feed(body.decode("utf-8", errors="replace"))
        parser.close()
    except (ValueError, AssertionError):
        raise _Failed("unreadable") from None
    return parser.files


def _read_file(url: str, index: str, limit: int) -> tuple[bytes, str]:
    """A page or metadata file of a file:// index (pip reads those too): only below the folder
    that holds the index (its pages link to ../../files), and never more than `limit`."""
    root = Path(unquote(urlsplit(index).path)).resolve().parent
    path = Path(unquote(urlsplit(url).path)).resolve()
    if path.is_dir():
        path = path / "index.html"
    if not path.is_relative_to(root):
        raise _Failed("unreadable")
    try:
        with path.open("rb") as handle:
            body = handle.read(limit + 1)
    except FileNotFoundError:
        raise urllib.error.HTTPError(url, 404, "not found", Message(), None) from None
    except OSError:
        raise _Failed("unreachable", str(root)) from None
    if len(body) > limit:
        raise _Failed("too_large")
    return body, "text/html" if path.suffix == ".html" else "application/octet-stream"


def _get(
    url: str, index: str, context: ssl.SSLContext, deadline: float, limit: int, accept: str = "*/*",
) -> tuple[bytes, str]:
    parts = urlsplit(url)
    if parts.scheme == "file" and urlsplit(index).scheme == "file":
        return _read_file(url, index, limit)
    if parts.scheme not in ("http", "https"):
        raise _Failed("unreadable")
    request = urllib.request.Request(redact(url), headers={"Accept": accept, "User-Agent": "ToolHub"})
    auth = urlsplit(index).netloc.rpartition("@")[0]
    if auth and parts.netloc == urlsplit(index).netloc:
        # Credentials go to the index's own host only, and never along a redirect.
        token = base64.b64encode(unquote(auth).encode()).decode()
        request.add_unredirected_header("Authorization", f"Basic {token}")
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _Failed("timeout")
    try:
        with urllib.request.urlopen(request, timeout=remaining, context=context) as response:  # noqa: S310 - scheme checked
            content_type = response.headers.get_content_type()
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > limit:
                raise _Failed("too_large")
            chunks, size = [], 0
            while chunk := response.read(64 * 1024):
                size += len(chunk)
                if size > limit:
                    raise _Failed("too_large")
                if time.monotonic() > deadline:
                    raise _Failed("timeout")
                chunks.append(chunk)
            return b"".join(chunks), content_type
    except urllib.error.HTTPError:
        raise
    except TimeoutError:
        raise _Failed("timeout") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, (TimeoutError, socket.timeout)):
            raise _Failed("timeout") from None
        raise _Failed("unreachable", urlsplit(redact(url)).hostname or "") from None


def _target_tags(python: tuple[int, int]) -> set[Tag]:
    platforms = list(platform_tags())
    interpreter = f"cp{python[0]}{python[1]}"
    return {*cpython_tags(python, platforms=platforms), *compatible_tags(python, interpreter, platforms=platforms)}


def _describe(
    name: str, page: dict, page_url: str, index: str, shown: str, python: tuple[int, int],
    context: ssl.SSLContext, deadline: float,
) -> IndexInfo:
    """Pick the latest release from the files (yanked ones left out; pre-releases only when
    there is nothing else) and read what its files and metadata say."""
    releases: dict[Version, list[tuple[dict, frozenset[Tag] | None]]] = {}
    for entry in page["files"]:
        if not isinstance(entry, dict) or entry.get("yanked") not in (None, False, ""):
            continue
        filename, url = entry.get("filename"), entry.get("url")
        if not isinstance(filename, str) or not isinstance(url, str):
            continue
        parsed = _parse_filename(filename)
        if parsed is None or parsed[0] != name:
            continue
        releases.setdefault(parsed[1], []).append((entry, parsed[2]))
    if not releases:
        return IndexInfo(state=FOUND, index=shown, wheel=None)
    finals = [v for v in releases if not v.is_prerelease]
    version = max(finals or releases)
    files = releases[version]
    target = _target_tags(python)
    wheels = [entry for entry, tags in files if tags is not None and tags & target]
    times = sorted(t for entry, _ in files if isinstance(t := entry.get("upload-time"), str) and _is_time(t))
    summary = license_ = ""
    requires: list[str] | None = None
    metadata = _metadata(wheels + [entry for entry, _ in files], page_url, index, context, deadline)
    if metadata is not None:
        summary = _one_line(metadata.get("Summary", ""))[:MAX_SUMMARY_CHARS]
        license_ = _license(metadata)
        requires = _requirements(metadata.get_all("Requires-Dist") or [], python)
    return IndexInfo(
        state=FOUND, index=shown, version=str(version)[:MAX_VERSION_CHARS], released=times[0] if times else "",
        summary=summary, license=license_, wheel=bool(wheels),
        dependencies=None if requires is None else len(requires), requires=tuple((requires or [])[:MAX_REQUIRES_SHOWN]),
    )


def _parse_filename(filename: str) -> tuple[str, Version, frozenset[Tag] | None] | None:
    try:
        if filename.endswith(".whl"):
            wheel_name, version, _, tags = parse_wheel_filename(filename)
            return wheel_name, version, tags
        sdist_name, version = parse_sdist_filename(filename)
        return sdist_name, version, None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None


def _is_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _metadata(entries: list[dict], page_url: str, index: str, context: ssl.SSLContext, deadline: float):
    """The core metadata of the first file that has a metadata file (PEP 714 `core-metadata`,
    or PEP 658's older `dist-info-metadata`), checked against its hash; None when none can be read."""
    for entry in entries:
        declared = entry.get("core-metadata", entry.get("dist-info-metadata"))
        if not declared:
            continue
        url = urljoin(page_url, entry["url"]).split("#", 1)[0] + ".metadata"
        try:
            body, _ = _get(url, index, context, deadline, MAX_METADATA_BYTES)
        except (_Failed, urllib.error.HTTPError):
            continue
        expected = declared.get("sha256") if isinstance(declared, dict) else None
        if isinstance(expected, str) and hashlib.sha256(body).hexdigest() != expected.lower():
            continue
        return BytesHeaderParser().parsebytes(body)
    return None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _license(metadata) -> str:
    """PEP 639's License-Expression, else the licence classifiers, else the License field's
    first line (which some projects fill with the whole licence text)."""
    expression = _one_line(metadata.get("License-Expression", ""))
    if expression:
        return expression[:MAX_LICENSE_CHARS]
    classifiers = [
        str(c).rsplit("::", 1)[-1].strip() for c in metadata.get_all("Classifier") or [] if str(c).startswith("License ::")
    ]
    if classifiers:
        return ", ".join(classifiers)[:MAX_LICENSE_CHARS]
    first = str(metadata.get("License", "")).strip().splitlines()
    return _one_line(first[0])[:MAX_LICENSE_CHARS] if first else ""


def _requirements(lines: list, python: tuple[int, int]) -> list[str]:
    """The names a release requires on the target Python, sorted (extras left out)."""
    environment = {"extra": "", "python_version": f"{python[0]}.{python[1]}", "python_full_version": f"{python[0]}.{python[1]}.0"}
    names = set()
    for line in lines:
        try:
            requirement = Requirement(str(line))
            if requirement.marker is None or requirement.marker.evaluate(environment):
                names.add(canonicalize_name(requirement.name))
        except (InvalidRequirement, ValueError, KeyError):
            continue
    return sorted(names)
