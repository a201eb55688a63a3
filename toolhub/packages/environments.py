"""Django-side glue for toolhub.packages.envbuild: settings in, locks and environments out.
Knows nothing of toolkits: callers pass requirements and locks as text."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from django.conf import settings
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from toolhub.packages import envbuild as envlib
from toolhub.packages.models import Approval, Package
from toolhub.sandbox import scratch
from toolhub.sandbox.build import BuildSandbox

RUNTIME_LOCK = Path(__file__).resolve().parent.parent / "runtime" / "requirements.txt"

Log = Callable[[str], None]


def index_settings() -> envlib.IndexSettings:
    return envlib.IndexSettings(
        index_url=settings.TOOLHUB_INDEX_URL or None,
        extra_index_urls=tuple(settings.TOOLHUB_EXTRA_INDEX_URLS),
        find_links=tuple(settings.TOOLHUB_FIND_LINKS),
        no_index=settings.TOOLHUB_NO_INDEX,
        cert=settings.TOOLHUB_INDEX_CERT or None,
        only_binary=settings.TOOLHUB_ONLY_BINARY,
        source_packages=source_build_names(),
    )


def source_build_names() -> tuple[str, ...]:
    """The approved packages an admin allowed to be built from source. Only approved ones: a
    package waiting for approval is never built from source, whatever its allowance says."""
    allowed = Package.objects.filter(status=Approval.APPROVED, source_build=True)
    return tuple(allowed.order_by("name").values_list("name", flat=True))


def build_sandbox() -> BuildSandbox:
    """Every lock and install runs in this (toolhub.sandbox.build); there is no way around it."""
    return BuildSandbox(
        user=settings.TOOLHUB_BUILD_USER,
        bwrap=settings.TOOLHUB_BWRAP,
        max_download_bytes=settings.TOOLHUB_BUILD_MAX_DOWNLOAD_BYTES,
    )


def timeouts(total_seconds: float | None = None) -> envlib.Timeouts:
    """The build limits from settings; `total_seconds` is what is left of a build's budget."""
    total = settings.TOOLHUB_BUILD_TIMEOUT if total_seconds is None else total_seconds
    return envlib.Timeouts(
        total_seconds=total,
        silence_seconds=settings.TOOLHUB_BUILD_SILENCE_TIMEOUT,
        concurrent_downloads=settings.TOOLHUB_BUILD_CONCURRENT_DOWNLOADS,
    )


def environments_root() -> Path:
    root = Path(settings.TOOLHUB_ENVIRONMENTS_DIR)
    root.mkdir(parents=True, exist_ok=True, mode=0o755)
    return root


def runtime_lock() -> str:
    """The runtime's own committed lock, for requirements that add nothing to it.

    The committed lock carries the index options of the machine that compiled it. A stored
    lock must mean the same thing on every host (its hash names the environment), so only
    its pins and hashes are kept; the index comes from this host's settings."""
    lines = RUNTIME_LOCK.read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("-"))


def environment_packages() -> list[str]:
    """TOOLHUB_ENVIRONMENT_PACKAGES: requirements every environment gets."""
    return [text.strip() for text in settings.TOOLHUB_ENVIRONMENT_PACKAGES if text.strip()]


def environment_package_names() -> set[str]:
    """The canonical names of TOOLHUB_ENVIRONMENT_PACKAGES (unparsable entries are left to the
    lock, which refuses them with the reason)."""
    names: set[str] = set()
    for text in environment_packages():
        try:
            names.add(canonicalize_name(Requirement(text).name))
        except InvalidRequirement:
            continue
    return names


def lock_compile(*, requirements: Sequence[str], constraints: Sequence[str], log: Log) -> str:
    """Resolve requirements (plus the runtime's base and TOOLHUB_ENVIRONMENT_PACKAGES) into a
    hashed lock with pip-compile."""
    with tempfile.TemporaryDirectory(prefix=f"{scratch.LOCK}{os.getpid()}-") as workdir:
        return envlib.compile_lock(
            base_requirements=[*envlib.BASE_REQUIREMENTS, *environment_packages()],
            requirements=list(requirements),
            constraints=list(constraints),
            index=index_settings(),
            log=log,
            timeouts=timeouts(),
            workdir=Path(workdir),
            cache_dir=_pip_cache(),
            interpreter=settings.TOOLHUB_INTERPRETER,
            sandbox=build_sandbox(),
        )


def _pip_cache() -> Path:
    """pip's and pip-tools' cache (the build user's). The directories above what the build
    sandbox is given must be traversable by the build user; they are not listable."""
    cache = Path(settings.DATA_DIR) / "cache" / "pip"
    cache.mkdir(parents=True, exist_ok=True)
    for directory in (cache.parent, cache):
        directory.chmod(0o711)
    return cache


def lock_prefix() -> str:
    """How a lock resolved for this host's interpreter starts (its Python release line)."""
    return f"{envlib.LOCK_PYTHON_PREFIX}{envlib.interpreter_release(settings.TOOLHUB_INTERPRETER)}\n"


def environment_existing(*, lock: str) -> Path | None:
    """The environment of a lock if this host has built it already (nothing is built here)."""
    if not lock:
        return None
    return envlib.existing_environment(lock=lock, root=environments_root(), interpreter=settings.TOOLHUB_INTERPRETER)


def environment_ensure(*, lock: str, log: Log | None = None, total_seconds: float | None = None) -> Path:
    """Build (or reuse) the environment of a lock on this host. Any worker host calls this
    before running code in it, so hosts need no shared disk."""
    if not lock:
        raise envlib.BuildFailed("the revision has no lock yet; build it first")
    log = log or (lambda line: None)
    # A built environment needs no index settings (which read the source-build allowances).
    ready = envlib.finished_environment(
        lock=lock, root=environments_root(), interpreter=settings.TOOLHUB_INTERPRETER, log=log
    )
    if ready is not None:
        return ready
    return envlib.ensure_environment(
        lock=lock,
        root=environments_root(),
        interpreter=settings.TOOLHUB_INTERPRETER,
        index=index_settings(),
        log=log,
        timeouts=timeouts(total_seconds),
        sandbox=build_sandbox(),
    )
