"""Which top-level modules a distribution provides, read from its wheel in a local wheelhouse
or file:// index: the `top_level.txt` of its `.dist-info`, else the first part of each path
the wheel holds. Only local files are read (never the network), so an upload may ask while
its page waits; a name with no local wheel provides nothing known.

No Django: the places come in as arguments (toolhub.packages.index_checks.local_places).
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

# Bounds: a wheelhouse folder scanned, a wheel's member list and its name files read.
MAX_FILES_SCANNED = 20_000
MAX_MEMBERS = 50_000
MAX_NAMES_BYTES = 256 * 1024


def local_directory(place: str) -> Path | None:
    """The local folder a find-links entry or a file:// index URL names, if there is one."""
    if "://" in place:
        parts = urlsplit(place)
        if parts.scheme != "file":
            return None
        place = unquote(parts.path)
    path = Path(place)
    return path if path.is_dir() else None


def _wheels(names: set[str], directory: Path) -> list[tuple[str, Version, Path]]:
    found: list[tuple[str, Version, Path]] = []
    scanned = 0
    # A wheelhouse holds its wheels at the top; a PEP 503 folder one level down per project.
    for pattern in ("*.whl", "*/*.whl"):
        for path in directory.glob(pattern):
            scanned += 1
            if scanned > MAX_FILES_SCANNED:
                return found
            try:
                wheel_name, version, _build, _tags = parse_wheel_filename(path.name)
            except InvalidWheelFilename:
                continue
            if wheel_name in names:
                found.append((wheel_name, version, path))
    return found


def top_level_modules(names: Iterable[str], places: list[str]) -> frozenset[str]:
    """The top-level import names the newest local wheel of each of `names` provides (none
    for a name without a local wheel)."""
    wanted: set[str] = {canonicalize_name(name) for name in names}
    newest: dict[str, tuple[Version, Path]] = {}
    for place in places:
        directory = local_directory(place) if wanted else None
        if directory is None:
            continue
        for name, version, path in _wheels(wanted, directory):
            if name not in newest or version > newest[name][0]:
                newest[name] = (version, path)
    modules: set[str] = set()
    for _version, path in newest.values():
        try:
            modules |= _read_names(path)
        except (OSError, zipfile.BadZipFile, UnicodeDecodeError):
            continue
    return frozenset(modules)


def _read_names(path: Path) -> frozenset[str]:
    with zipfile.ZipFile(path) as wheel:
        members = wheel.infolist()[:MAX_MEMBERS]
        by_name = {member.filename: member for member in members}
        top_level = next(
            (m for n, m in by_name.items() if n.count("/") == 1 and n.endswith(".dist-info/top_level.txt")), None
        )
        if top_level is not None and top_level.file_size <= MAX_NAMES_BYTES:
            text = wheel.read(top_level).decode("utf-8")
            return frozenset(line.strip().split("/")[0] for line in text.splitlines() if line.strip())
    names = set()
    for member in members:
        first = member.filename.split("/")[0]
        if first.endswith((".dist-info", ".data")) or first == "__pycache__":
            continue
        if "/" in member.filename:
            names.add(first)
        elif first.endswith(".py"):
            names.add(first.removesuffix(".py"))
        elif first.endswith(".so") or first.endswith(".pyd"):
            names.add(first.split(".")[0])
    return frozenset(name for name in names if name.isidentifier())
