"""The sandbox package builds run in: pip-compile's lock, uv's install, the byte-compilation.

Building a package from source runs its build code (``setup.py``, a PEP 517 backend), and even
a wheel's ``.pth`` files run when the new environment's Python starts. So every step of a build
runs in bubblewrap as the unprivileged build user (``toolhub-build``, made by
``scripts/system-setup``), never as the worker's account:

- Identity: the same as the run sandbox's (``toolhub.sandbox.launcher``): the process that
  executes bwrap has already switched to the build user, which has no capabilities inside a new
  user namespace, with ``no_new_privs``, no nested user namespaces and the run sandbox's seccomp
  filter.
- Namespaces: user, pid, IPC, UTS, cgroup and network are all new, so no step reaches the
  host's loopback services (PostgreSQL, Redis) or the LAN. A step that needs the index (the
  lock and the install, when an index or wheelhouse is not on this host) is given the index
  hosts, exact ``(host, port)`` pairs: the worker runs an egress proxy
  (``toolhub.sandbox.egress``, ``only_targets``) on a UNIX socket bound into the sandbox, and
  the step runs under the run sandbox's forwarder (``toolhub/runtime/egress_forwarder.py``,
  started as a script), which listens on the sandbox's own loopback and sets
  ``HTTP(S)_PROXY``/``ALL_PROXY`` for pip-compile and uv. The proxy connects to those pairs
  only, whatever address they have (a mirror on the LAN or on this host works), and refuses
  anything else; the build log shows each refusal.
- Filesystem: ``/usr`` read-only, the few files of ``/etc`` that name resolution and TLS need
  (``_ETC``), ``/proc`` and ``/dev`` as in the run sandbox, small ``/tmp`` and ``/dev/shm``, then
  exactly the paths the step is given: ``readable`` ones read-only (ToolHub's own virtualenv,
  which holds pip-tools and uv, local wheelhouses and file:// indexes, a CA bundle), and
  ``writable`` ones read-write (this step's scratch directory, the environment being built,
  the download cache). Each is opened by the worker and handed over as a descriptor
  (``--ro-bind-fd``/``--bind-fd``), at the same path as on the host, so paths in logs and
  in the built environment are the real ones. bubblewrap, running as the build user, still
  resolves each one's path, so the directories above them must be traversable by other users
  (o+x; ``SandboxUnavailable`` says which one is not). Nothing else of the host is there: not the data
  directory, not the settings file, not ``/etc/shadow``, not ``/home`` or ``/root``.
- Environment: ``--clearenv`` and only the variables the caller passes (the allowlisted ones of
  ``toolhub.packages.build_runner.tool_env``); bwrap itself gets two.

``own(path)`` gives a directory the worker made to the build user before a step writes into
it; ``reclaim(path)`` gives a built tree back to the worker's account (without following
symlinks), so that neither the build user nor the run sandboxes can change it afterwards.

Django-free: ``toolhub.packages.environments`` builds a ``BuildSandbox`` from settings.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolhub.sandbox.egress.proxy import EgressPolicy, EgressProxy, ProxyHandle, start_proxy_thread
from toolhub.sandbox.launcher import (
    _BWRAP_ENV,
    _Identity,
    _privilege_kwargs,
    _proc_args,
    _resolve_identity,
    _seccomp_fd,
    _usr_args,
)
from toolhub.sandbox.limits import SandboxUnavailable

DEFAULT_BUILD_USER = "toolhub-build"

# What name resolution, TLS and the C library read from /etc; bound read-only when present.
_ETC = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/ld.so.cache",
)

# /tmp and /dev/shm inside are in memory; the steps put their temporary files in their own
# scratch directory (TMPDIR), so these only catch what ignores TMPDIR.
_TMPFS_BYTES = 256 * 1024 * 1024

# Where a networked step finds the proxy's socket. The limits only stop a runaway build; what
# it may reach is the point.
_EGRESS_DIR = "/run/toolhub-egress"
# Standard library only, so it runs as a script with any Python (toolhub.sandbox imports no
# other part of ToolHub). Its bytes are handed over, wherever ToolHub is installed.
_FORWARDER = Path(__file__).resolve().parent.parent / "runtime" / "egress_forwarder.py"
_FORWARDER_PATH = f"{_EGRESS_DIR}-forwarder.py"
# What one networked step may download in all (TOOLHUB_BUILD_MAX_DOWNLOAD_BYTES): enough for
# the largest wheels people lock (torch with its CUDA libraries), not for a runaway.
DEFAULT_MAX_DOWNLOAD_BYTES = 8 * 1024**3
_MAX_CONNECTIONS = 100_000


@dataclass(frozen=True)
class Confined:
    """One step's command line for bwrap and what subprocess.Popen needs to start it."""

    argv: list[str]
    popen: dict
    # The proxy of a step with network.
    egress: ProxyHandle | None = None

    def egress_lines(self) -> list[str]:
        """One line for each connection the proxy refused or could not make, so far."""
        if self.egress is None:
            return []
        report = self.egress.report()
        lines = []
        for kind in ("refused", "failed"):
            entries = report[kind]
            assert isinstance(entries, list)
            lines += [f"egress {kind}: {entry['reason']}" for entry in entries]
        # A transfer cut at the byte limit is no refusal of its own; the tool then only says
        # that a download broke off.
        limits = report["limits_reached"]
        assert isinstance(limits, list)
        if "bytes" in limits and not any("byte limit reached" in line for line in lines):
            lines.append(f"egress refused: byte limit reached ({self.egress.proxy.policy.max_bytes} bytes per invocation)")
        return lines


@dataclass(frozen=True)
class BuildSandbox:
    user: str = DEFAULT_BUILD_USER
    bwrap: str = "bwrap"
    # Host paths every step sees read-only, at the same path.
    readable: tuple[str, ...] = ()
    # The Python a networked step's forwarder runs with; one the sandbox sees.
    python: str = "/usr/bin/python3"
    max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` if builds cannot be confined on this host."""
        _resolve_identity(bwrap=self.bwrap, sandbox_user=self.user)

    def own(self, path: Path) -> None:
        """Hand a directory tree the worker made to the build user (when the worker is root).
        A tree whose top the build user owns already (a cache) is left as it is."""
        identity = _resolve_identity(bwrap=self.bwrap, sandbox_user=self.user)
        if identity.switch and os.lstat(path).st_uid != identity.uid:
            _chown_tree(path, identity.uid, identity.gid)
            os.chmod(path, 0o700, follow_symlinks=False)

    def reclaim(self, path: Path) -> None:
        """Give a tree the build user wrote back to the worker's account."""
        if _resolve_identity(bwrap=self.bwrap, sandbox_user=self.user).switch:
            _chown_tree(path, os.geteuid(), os.getegid())

    @contextlib.contextmanager
    def command(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        writable: Sequence[Path],
        network: Sequence[tuple[str, int]],
    ) -> Iterator[Confined]:
        """The bwrap command line for one step, which reaches only the ``network`` pairs; the
        descriptors and the proxy it needs stay until the ``with`` block ends, which the caller
        leaves once the step has ended."""
        identity = _resolve_identity(bwrap=self.bwrap, sandbox_user=self.user)
        fds: list[int] = []
        with contextlib.ExitStack() as stack:
            egress = None
            if network:
                egress = stack.enter_context(_egress_proxy(
                    network, identity.uid if identity.switch else None, self.max_download_bytes
                ))
                argv = [self.python, "-I", _FORWARDER_PATH, f"{_EGRESS_DIR}/egress.sock", "--", *argv]
            try:
                yield self._confined(identity, argv, env, cwd, writable, egress, fds)
            finally:
                for fd in fds:
                    os.close(fd)

    def _confined(
        self,
        identity: _Identity,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        writable: Sequence[Path],
        egress: ProxyHandle | None,
        fds: list[int],
    ) -> Confined:
        args = [identity.bwrap, "--unshare-all"]
        args += ["--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"]
        args += ["--hostname", "toolhub-build", "--clearenv"]
        for name, value in env.items():
            args += ["--setenv", name, value]
        args += [*_usr_args(), *_proc_args(), "--dev", "/dev"]
        for mount in ("/tmp", "/dev/shm"):
            args += ["--size", str(_TMPFS_BYTES), "--tmpfs", mount]
        # After the tmpfs mounts, which would hide what is bound below them.
        binds = [("--ro-bind-fd", path) for path in (*_ETC, *self.readable) if os.path.exists(path)]
        binds += [("--bind-fd", str(path)) for path in writable]
        for option, path in binds:
            _require_reachable(path, identity.uid)
            args += [option, _open(path, fds), path]
        if egress is not None:
            args += ["--ro-bind-fd", _open(os.path.dirname(egress.socket_path), fds), _EGRESS_DIR]
            script = os.memfd_create("egress-forwarder", os.MFD_CLOEXEC)
            fds.append(script)
            os.write(script, _FORWARDER.read_bytes())
            os.lseek(script, 0, os.SEEK_SET)
            args += ["--perms", "0444", "--ro-bind-data", str(script), _FORWARDER_PATH]
        seccomp = _seccomp_fd()
        fds.append(seccomp)
        args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", str(cwd)]
        args += ["--seccomp", str(seccomp), "--", *argv]
        popen = {"env": dict(_BWRAP_ENV), "cwd": "/", "pass_fds": tuple(fds), **_privilege_kwargs(identity)}
        return Confined(argv=args, popen=popen, egress=egress)


@contextlib.contextmanager
def _egress_proxy(targets: Sequence[tuple[str, int]], owner: int | None, max_bytes: int) -> Iterator[ProxyHandle]:
    """A proxy to exactly ``targets`` on a socket only the build user (``owner``) may use."""
    with tempfile.TemporaryDirectory(prefix="toolhub-build-egress-") as directory:
        os.chmod(directory, 0o711)
        policy = EgressPolicy(allow_hosts=None, max_bytes=max_bytes, max_connections=_MAX_CONNECTIONS)
        proxy = EgressProxy(policy, os.path.join(directory, "egress.sock"), socket_mode=0o600, only_targets=targets)
        handle = start_proxy_thread(proxy)
        try:
            if owner is not None:
                os.chown(handle.socket_path, owner, -1)
            yield handle
        finally:
            handle.stop()


def _open(path: str, fds: list[int]) -> str:
    # O_PATH: the worker names the exact directory or file, whatever the build user may read
    # on the way to it; what is inside keeps its own permissions.
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    fds.append(fd)
    return str(fd)


def _require_reachable(path: str, uid: int) -> None:
    for directory in Path(path).parents:
        info = os.stat(directory)
        if not (info.st_mode & 0o001 or (info.st_uid == uid and info.st_mode & 0o100)):
            raise SandboxUnavailable(
                f"{directory} is not traversable by other users (mode o+x missing), so the build "
                f"sandbox cannot be given {path}."
            )


def _chown_tree(top: Path, uid: int, gid: int) -> None:
    os.chown(top, uid, gid, follow_symlinks=False)
    for directory, subdirs, files in os.walk(top):
        for name in (*subdirs, *files):
            os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)
