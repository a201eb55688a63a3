"""A pool of unprivileged uids, one leased to one sandbox at a time.

Namespaces separate most of what one sandbox could share with another, but the kernel keys some
things by uid alone, host-wide: the user keyring, ``RLIMIT_NPROC``, who may signal or trace
whom, which ``/proc/<pid>`` entries may be read. With every sandbox running as the same uid, a
run by one user could reach a concurrent run by another through any of them. So each sandbox
runs as a uid of its own, leased from a pool for the length of the run and given back after it.

The pool is the users ``<prefix><first>`` .. ``<prefix><first+size-1>`` (``toolhub-sb-0000``...),
each with its own group, created by ``scripts/system-setup`` (``TOOLHUB_SANDBOX_UIDS`` users from
``TOOLHUB_SANDBOX_UID_FIRST``). Two pools on one host with ranges that do not overlap never
touch each other's uids (the test suite's parts run that way). A
lease is an exclusive ``flock`` on ``<lock_dir>/<user>.lock``: it holds across every worker
process and thread of the host (each lease opens the file anew, and ``flock`` locks belong to
the open file), and the kernel drops it when its holder dies, so a crashed worker leaks nothing.
A uid is only leased when the lock is free *and* no process of that uid is left on the host
(a process of a killed sandbox can take a moment to be reaped), so a new lease never shares its
uid's rlimit count, keyring or signals with anything before it. A process of a uid whose lock is
free belongs to no lease, so it is killed when a lease comes across it, and ``sweep()`` (at
worker start) kills every such process: bubblewrap's ``--die-with-parent`` does not reliably
take the sandbox along when the worker that started it is killed (a bubblewrap killed while it
set the sandbox up was seen left waiting for ever, and a sandbox's pid 1 outliving its
bubblewrap, sleeping in a tool's call), and nothing else would ever end them. The lock directory is root's,
mode 0700, outside everything a sandbox can see.

Django-free: the worker glue (``toolhub.toolkits.sandboxing``) builds the pool from settings.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import random
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from toolhub.sandbox.limits import SandboxUnavailable

DEFAULT_PREFIX = "toolhub-sb-"

def user_name(number: int, prefix: str = DEFAULT_PREFIX) -> str:
    """The name of the pool's user `number` (``toolhub-sb-0007``)."""
    return f"{prefix}{number:04d}"


# How often a lease that found every uid busy looks again.
_RETRY_SECONDS = 0.02


@dataclass(frozen=True)
class SandboxUser:
    name: str
    uid: int
    gid: int


class Lease:
    """One held uid; the lock goes with ``release()`` or with the holder's death."""

    def __init__(self, *, user: SandboxUser, fd: int) -> None:
        self.user = user
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class UidsBusy(SandboxUnavailable):
    """Every uid of the pool stayed leased for as long as the caller would wait."""


class UidPool:
    """Lease one of ``size`` sandbox users at a time; see the module docstring."""

    def __init__(
        self,
        *,
        size: int,
        lock_dir: Path,
        prefix: str = DEFAULT_PREFIX,
        first: int = 0,
        lease_timeout: float = 30.0,
    ) -> None:
        if size < 1:
            raise ValueError("a uid pool needs at least one user")
        if first < 0:
            raise ValueError("a uid pool's first user number cannot be negative")
        self.size = size
        self.first = first
        self.prefix = prefix
        self.lock_dir = Path(lock_dir)
        self.lease_timeout = lease_timeout

    def names(self) -> list[str]:
        return [user_name(number, self.prefix) for number in range(self.first, self.first + self.size)]

    def users(self) -> list[SandboxUser]:
        """Every user of the pool; ``SandboxUnavailable`` if one is missing or privileged."""
        found = []
        missing = []
        for name in self.names():
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                missing.append(name)
                continue
            if entry.pw_uid == 0 or entry.pw_gid == 0:
                raise SandboxUnavailable(f"the sandbox user {name!r} has uid or gid 0; it must be unprivileged.")
            found.append(SandboxUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid))
        if missing:
            raise SandboxUnavailable(
                f"{len(missing)} of the {self.size} sandbox users are missing (first: {missing[0]!r}). "
                f"Create them with `TOOLHUB_SANDBOX_UIDS={self.size} TOOLHUB_SANDBOX_UID_FIRST={self.first} scripts/system-setup`."
            )
        if len({user.uid for user in found}) != len(found) or len({user.gid for user in found}) != len(found):
            raise SandboxUnavailable("the sandbox users must each have a uid and a group of their own")
        return found

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` if the pool cannot be used on this host."""
        self.users()
        self._lock_directory()

    @contextmanager
    def lease(self) -> Iterator[SandboxUser]:
        """Hold one free sandbox user for the length of the ``with`` block.

        Waits up to ``lease_timeout`` seconds when all are busy, then raises
        ``SandboxUnavailable``.
        """
        held = self.acquire()
        try:
            yield held.user
        finally:
            held.release()

    def acquire(self, *, wait: float | None = None) -> Lease:
        """Take one free sandbox user until ``Lease.release()`` (a warm sandbox's lifetime),
        waiting ``wait`` seconds at most (``lease_timeout`` by default) before ``UidsBusy``."""
        users = self.users()
        directory = self._lock_directory()
        deadline = time.monotonic() + (self.lease_timeout if wait is None else wait)
        while True:
            held = self._try_lease(users, directory)
            if held is not None:
                return Lease(user=held[0], fd=held[1])
            if time.monotonic() >= deadline:
                raise UidsBusy(
                    f"all {self.size} sandbox uids stayed busy for {self.lease_timeout:g} s: "
                    "raise TOOLHUB_SANDBOX_UIDS (and run scripts/system-setup) or lower the worker concurrency."
                )
            time.sleep(_RETRY_SECONDS)

    def _try_lease(self, users: list[SandboxUser], directory: Path) -> tuple[SandboxUser, int] | None:
        # A random starting point spreads the workers over the pool, so they rarely contend.
        start = random.randrange(len(users))
        processes: dict[int, list[int]] | None = None
        for offset in range(len(users)):
            user = users[(start + offset) % len(users)]
            fd = os.open(directory / f"{user.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise
            if processes is None:
                processes = processes_by_uid()
            if user.uid in processes:
                # Left by no lease (the lock was free): a sandbox whose worker died, or one
                # killed a moment ago and not yet reaped. The uid is leased once they are gone.
                _kill(processes[user.uid])
                os.close(fd)
                continue
            return user, fd
        return None

    def sweep(self) -> int:
        """Kill every process of a pool uid that no lease holds (see the module docstring);
        returns how many there were. A uid leased right now is left alone."""
        directory = self._lock_directory()
        processes = processes_by_uid()
        killed = 0
        for user in self.users():
            if user.uid not in processes:
                continue
            fd = os.open(directory / f"{user.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            else:
                killed += _kill(processes[user.uid])
            finally:
                os.close(fd)
        return killed

    def _lock_directory(self) -> Path:
        directory = self.lock_dir
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(directory)
        if not os.path.isdir(directory) or os.path.islink(directory) or info.st_uid != os.geteuid():
            raise SandboxUnavailable(f"{directory} must be a directory owned by the worker's user")
        if info.st_mode & 0o077:
            os.chmod(directory, 0o700)
        return directory


def processes_by_uid() -> dict[int, list[int]]:
    """The processes on this host right now by the uid that owns them (``/proc/<pid>``
    belongs to its euid)."""
    found: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                found.setdefault(os.stat(f"/proc/{name}").st_uid, []).append(int(name))
            except FileNotFoundError:
                continue
    return found


def uids_with_processes() -> set[int]:
    """The uids that own a process on this host right now."""
    return set(processes_by_uid())


def _kill(pids: list[int]) -> int:
    """SIGKILL each of ``pids`` (a zombie or one gone already is no error); how many there were."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    return len(pids)
