"""The memory budget all warm sandboxes of a host share (``TOOLHUB_SANDBOX_WARM_MEMORY_MB``):
each sandbox's share is a file holding its byte count, locked by the process that holds the
sandbox, so the shares of a worker that died are free again without anyone cleaning up.

Django-free, like the rest of ``toolhub.sandbox``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from toolhub.sandbox.limits import SandboxUnavailable


class WarmBudgetExceeded(SandboxUnavailable):
    """One more warm sandbox would exceed the host's memory budget (the call then runs cold)."""


# What a warm sandbox is counted at until it has been measured (one measured ~28 MiB PSS idle
# with pydantic; pre-imported packages add theirs).
DEFAULT_SANDBOX_ESTIMATE = 64 << 20


class _Reservation:
    """One warm sandbox's share of a MemoryBudget: a file holding its byte count, locked by its
    holder for as long as the sandbox lives (the kernel drops the lock if the holder dies)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def write(self, size: int) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, str(size).encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None


@dataclass
class MemoryBudget:
    """The memory every warm sandbox of this host may use together (all worker processes):
    each sandbox reserves its share in ``directory`` before it starts, at its estimate, and
    after it is ready at what it measured (the PSS of its processes); one that would go over is
    not started, or retired at once. ``directory`` is the worker's own (0700), like the uid
    pool's locks."""

    limit_bytes: int
    directory: Path

    def reserve(self, size: int) -> _Reservation | None:
        """A reservation of ``size`` bytes, or None when the budget cannot hold it."""
        with self._locked() as used:
            if used + size > self.limit_bytes:
                return None
            path = self.directory / f"{os.getpid()}-{time.monotonic_ns()}.warm"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            reservation = _Reservation(path, fd)
            reservation.write(size)
            return reservation

    def resize(self, reservation: _Reservation, size: int) -> bool:
        """Count ``reservation`` at ``size`` from now on if the budget holds it (else unchanged)."""
        with self._locked() as used:
            current = self._size(reservation.path)
            if used - current + size > self.limit_bytes:
                return False
            reservation.write(size)
            return True

    def used(self) -> int:
        with self._locked() as used:
            return used

    def usage(self) -> tuple[int, int]:
        """How many warm sandboxes hold a share now, and their bytes together (for /metrics)."""
        with self._locked():
            sizes = self._live()
        return len(sizes), sum(sizes)

    @contextmanager
    def _locked(self) -> Iterator[int]:
        """Hold the budget's lock; yields what every live reservation adds up to."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self._sum()
        finally:
            os.close(fd)

    def _sum(self) -> int:
        return sum(self._live())

    def _live(self) -> list[int]:
        """The live shares' sizes; the files of dead holders are removed."""
        sizes: list[int] = []
        for path in self.directory.glob("*.warm"):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                sizes.append(self._size(path))
            else:
                # Its holder is gone (a worker that died): the share is free again.
                path.unlink(missing_ok=True)
            finally:
                os.close(fd)
        return sizes

    @staticmethod
    def _size(path: Path) -> int:
        try:
            return int(path.read_text() or 0)
        except (OSError, ValueError):
            return 0
