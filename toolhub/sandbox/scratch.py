"""Temporary directories named after the process that made them, so a worker that starts
can remove those of workers that died (SIGKILL, OOM, a power cut) without touching the
live ones: `/tmp/<prefix><pid>-<random>` (egress sockets, build and lock scratch space).

Django-free; toolhub.toolkits.sandboxing sweeps at worker start."""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

# Every prefix ToolHub's workers create temporary directories with.
EGRESS = "th-egress-"
BUILD = "toolhub-build-"
LOCK = "toolhub-lock-"
PREFIXES = (EGRESS, BUILD, LOCK)
_NAME = re.compile(r"^(?:" + "|".join(re.escape(p) for p in PREFIXES) + r")(\d+)-")


def make_dir(prefix: str, parent: str | Path | None = None) -> Path:
    """A new private directory `<parent>/<prefix><pid>-<random>` (parent: the temp dir)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def sweep_dead(parent: str | Path | None = None) -> list[Path]:
    """Remove the directories of processes that are gone; returns what was removed."""
    root = Path(parent or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _NAME.match(entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        try:
            if entry.is_symlink() or not entry.is_dir():
                continue
            shutil.rmtree(entry)
        except OSError:
            logger.warning("could not remove %s left by a dead worker", entry, exc_info=True)
            continue
        removed.append(entry)
    if removed:
        logger.info("removed %d temporary directories left by dead workers", len(removed))
    return removed
