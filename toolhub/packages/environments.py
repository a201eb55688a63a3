"""Django-side glue for toolhub.packages.envbuild: settings in, a revision's lock and
environment out."""

from __future__ import annotations

import time
from pathlib import Path

from django.conf import settings

from toolhub.packages import envbuild as envlib
from toolhub.toolkits.models import Revision


def index_settings() -> envlib.IndexSettings:
    return envlib.IndexSettings(
        index_url=settings.TOOLHUB_INDEX_URL or None,
        extra_index_urls=tuple(settings.TOOLHUB_EXTRA_INDEX_URLS),
        find_links=tuple(settings.TOOLHUB_FIND_LINKS),
        no_index=settings.TOOLHUB_NO_INDEX,
        cert=settings.TOOLHUB_INDEX_CERT or None,
        only_binary=settings.TOOLHUB_ONLY_BINARY,
    )


def timeouts(total_seconds: float | None = None) -> envlib.Timeouts:
    """The build limits from settings; `total_seconds` is what is left of a build's budget."""
    total = settings.TOOLHUB_BUILD_TIMEOUT if total_seconds is None else total_seconds
    return envlib.Timeouts(total_seconds=total, silence_seconds=settings.TOOLHUB_BUILD_SILENCE_TIMEOUT)


def environments_root() -> Path:
    root = Path(settings.TOOLHUB_ENVIRONMENTS_DIR)
    root.mkdir(parents=True, exist_ok=True, mode=0o755)
    return root


class BuildLog:
    """Collects build output and writes it to the revision at most a few times a second,
    so the Environment tab can show it while the build runs."""

    def __init__(self, revision: Revision, interval: float = 0.5):
        self.revision_id = revision.pk
        self.lines: list[str] = [revision.build_log] if revision.build_log else []
        self.interval = interval
        self._flushed = 0.0

    def __call__(self, line: str) -> None:
        self.lines.append(line.rstrip("\n"))
        # A command line ("$ uv pip install ...") starts a step that may stay silent for
        # minutes, so it is written at once: the tab then shows what the build is doing.
        if line.startswith("$ ") or time.monotonic() - self._flushed > self.interval:
            self.flush()

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def flush(self) -> None:
        self._flushed = time.monotonic()
        Revision.objects.filter(pk=self.revision_id).update(build_log=self.text[-200_000:])


def ensure_revision_environment(revision: Revision, log=None, *, total_seconds: float | None = None) -> Path:
    """Build (or reuse) the environment for a revision's stored lock. Any worker host
    calls this before running a revision, so hosts need no shared disk."""
    if not revision.lock:
        raise envlib.BuildFailed("the revision has no lock yet; build it first")
    return envlib.ensure_environment(
        lock=revision.lock,
        root=environments_root(),
        interpreter=settings.TOOLHUB_INTERPRETER,
        index=index_settings(),
        log=log or (lambda line: None),
        timeouts=timeouts(total_seconds),
    )
