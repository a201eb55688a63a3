"""Start untrusted toolkit code inside a bubblewrap sandbox and talk to it over pipes.

This module is the launcher only: it knows nothing about Django (settings come in as
arguments) and nothing about tools. It starts a command in a fresh sandbox, writes one JSON
request line on the command's stdin, hands every JSON line the command prints on stdout to a
callback, writes back whatever the callback returns, and enforces the limits. The code that runs
inside (``toolhub/runtime/``) defines what the lines mean.

API
---
``run_sandboxed(*, interpreter_env, runtime_dir, source_path, request, limits, on_message,
sandbox_user="toolhub-sandbox", bwrap="bwrap", extra_binds=(), argv=DEFAULT_ARGV,
cgroup_root=Path("/sys/fs/cgroup"), uid_pool=None) -> SandboxOutcome``

- With ``uid_pool`` (a ``toolhub.sandbox.uids.UidPool``) the sandbox runs as a uid leased for
  this run alone instead of ``sandbox_user``; the worker always passes one.

- ``interpreter_env`` (a virtualenv) is mounted read-only at ``/opt/env``, ``runtime_dir`` (a
  copy made by ``ensure_runtime_copy``) at ``/opt/runtime``, the bytes of ``source_path`` (read
  by the worker, handed over in a memfd) at ``/opt/toolkit/toolkit.py``, and each
  ``(host_path, sandbox_path)`` of ``extra_binds`` read-only at its sandbox path (a UNIX socket
  bound this way can still be connected to). ``argv`` runs inside; by default
  ``/opt/env/bin/python -I /opt/runtime/main.py``. ``cgroup_root=None`` turns cgroups off.
- ``request`` is written as the first stdin line. Every stdout line must be a JSON object.
  Objects whose ``kind`` is ``result``, ``error`` or ``introspection`` are *final*: the first one
  becomes ``SandboxOutcome.final``, stdin is closed, and the command gets
  ``Limits.exit_grace_seconds`` to exit before it is killed. Every other object goes to
  ``on_message``; when that returns a dict, the dict is written back as one stdin line (how a
  ``{"kind": "call"}`` gets its ``{"kind": "call_result"}``). Other lines are dropped and counted
  in ``dropped_lines``.
- ``on_message`` runs synchronously, and the time spent in it is host time, not the tool's: it
  is not charged to ``Limits.wall_seconds``, up to ``Limits.host_wait_seconds`` in total. The
  callback must bound its own waits (the ``awaiting_input`` timeout, say): the launcher cannot
  kill anything while the callback blocks. If it raises, the sandbox is killed and the
  exception propagates.
- ``SandboxOutcome.status`` is ``ok`` (a final message arrived), ``timed_out``
  (``limit="wall_time"``), ``limit_exceeded`` or ``crashed`` (no final message, no limit to
  blame; ``exit_code`` and ``stderr_tail`` tell more). ``limit`` names the limit: ``wall_time``,
  ``cpu_time``, ``memory``, ``processes``, ``output``, ``message_size`` (a stdout line over
  ``Limits.message_bytes``), ``file_size`` or ``tmp_space`` (``/tmp`` full). A final *error*
  caused by a limit (``MemoryError``, ``EFBIG``, ``ENOSPC``, a failed ``fork``) is also
  ``limit_exceeded``, with the final message kept for its traceback. ``limits_hit`` lists every
  limit seen reached (a fork bomb that then runs out of wall time: ``wall_time``, ``processes``).
  ``exit_code`` is the command's (128 + N when signal N killed it; None for a warm call that
  answered before its process exited), ``cpu_ms`` the CPU time of every process of the run
  (cgroup ``cpuacct``, else the command's rusage), ``max_rss_kb`` the largest resident set of
  the command or a child it waited for.
- ``SandboxUnavailable`` is raised when bubblewrap is missing, the sandbox user is missing or
  privileged, the worker can neither switch to that user nor is it, or bubblewrap fails while
  building the sandbox (for instance a bind source the sandbox user cannot read). Nothing ever
  falls back to running without the sandbox.
- ``check_sandbox(*, sandbox_user, bwrap, probe=True)`` runs the same checks plus an empty
  sandbox, for worker start-up or a health check. ``ensure_runtime_copy(*, runtime_src,
  data_dir)`` copies the runtime into ``data_dir/runtime/<content hash>/`` with modes the
  sandbox user can read.

What is enforced, and how
-------------------------
- Identity: the process that executes bwrap has already dropped to the sandbox user
  (``subprocess``'s ``user``/``group``/``extra_groups=[]``, applied before exec), because
  bubblewrap started by real root keeps every capability inside. Inside, the command runs as
  that uid in a new user namespace, with no capabilities and ``no_new_privs``, and cannot create
  user namespaces of its own (``--disable-userns``). Needs bubblewrap 0.8 (Debian 12).
- Namespaces: ``--unshare-all`` plus a compulsory ``--unshare-user``: user, pid, network, IPC,
  UTS and cgroup. The network namespace has only its own loopback, so the host's loopback
  services (Redis, PostgreSQL) are out of reach. ``--new-session`` prevents terminal injection.
  The command is pid 1 of its pid namespace (``--as-pid-1``): bubblewrap then waits for it
  directly, and no reaper process is left as a zombie at the end of a run.
- Filesystem: a new root with ``/usr`` read-only (``/bin``, ``/lib``... as the symlinks of a
  merged-usr host), the base interpreter's prefix if it lives outside ``/usr``, ``/opt/env``,
  ``/opt/runtime``, ``/opt/toolkit/toolkit.py``, a ``/proc`` of the new pid namespace, a
  minimal ``/dev``, and size-capped tmpfs mounts on ``/tmp`` and ``/dev/shm`` (``tmp_bytes``
  each). No ``/etc`` at all: CPython and pydantic start without it. ``/`` and ``/dev`` are then
  remounted read-only, as their tmpfs have no size cap.
- System calls: a seccomp filter (``toolhub.sandbox.seccomp``, built with libseccomp) is
  loaded by bubblewrap right before the command starts (``--seccomp``); what it refuses and why
  is listed there and in docs/sandbox.md. ``/proc/cmdline`` and the other host-describing files of
  ``/proc`` (``_PROC_MASKED``) are covered by ``/dev/null``.
- Environment: bwrap itself gets a two-variable environment, and the command ``--clearenv``
  plus PATH, LANG=C.UTF-8, HOME=/tmp, PYTHONDONTWRITEBYTECODE, PYTHONUNBUFFERED and
  MALLOC_ARENA_MAX=2 (fewer malloc arenas keep threaded code inside the address-space limit).
- Descriptors: ``close_fds=True``; the only descriptors passed are the source's memfd, the
  seccomp program's memfd and bubblewrap's status pipe, which bubblewrap closes before the
  command starts.
- rlimits, set in the child after the uid switch and before exec: RLIMIT_CPU (soft = hard, as
  pid 1 ignores SIGXCPU: SIGKILL at ``cpu_seconds`` of CPU per process), RLIMIT_AS
  (``memory_bytes``; counts reserved address space, threads' stacks included, not tmpfs),
  RLIMIT_NOFILE, RLIMIT_FSIZE, RLIMIT_CORE = 0, and RLIMIT_NPROC. The kernel counts RLIMIT_NPROC
  per uid over the whole host: with a uid leased from a pool it is this run's own limit
  (``processes`` + 1 for bubblewrap, one more where a pids cgroup stops the run first and says
  so); concurrent runs under the one shared sandbox user share
  it, so there it is the limit only where there is no pids cgroup, and 8 times that as a
  host-wide backstop where there is.
- cgroups v1, where the ``memory``, ``pids`` and ``cpuacct`` hierarchies are writable (as root
  on Debian 12's hybrid layout): each run gets ``toolhub-<worker pid>-<random>`` under the
  worker's own cgroup in each, joined by the child before exec, so bubblewrap and every
  descendant are inside. Memory limit: ``memory_bytes`` + 2 x ``tmp_bytes`` + 64 MiB, swap
  included; pids limit: ``processes`` + 1. The group is emptied with SIGKILL and removed after
  the run; groups left by a dead worker are removed by the next run. No cgroup v2 yet: there
  the rlimits alone apply (``SandboxOutcome.cgroups`` says which).
- Wall time, output and message size are watched by the worker: past ``wall_seconds`` (plus
  host time), past ``output_bytes`` of stdout and stderr together, or on a stdout line longer
  than ``message_bytes``, the command is killed. As pid 1 of its namespace its death takes
  every other process there with it, ``setsid`` daemons included; bubblewrap reaps it and
  exits, and is killed too if it has not after two seconds. A worker that dies mid-run takes
  the sandbox with it (``--die-with-parent``; the parent-death signal follows the *thread* that
  started bwrap, so call ``run_sandboxed`` from a thread that outlives the call).
- stderr is kept as a tail of ``stderr_tail_bytes``.
- The host never follows a symlink the sandbox could have written: the sandbox has no writable
  host path at all (its ``/tmp`` and ``/dev/shm`` are in memory and vanish with it). The only
  host files this module writes are its cgroup directories and the runtime copy, neither of
  which the sandbox can reach.

Measured on the development machine (Debian 12, 2 vCPUs, shared and busy): an empty sandbox
(``check_sandbox()``) about 50 ms, a ``python -I -S`` script through ``run_sandboxed`` about
110-150 ms, the real runtime calling a trivial tool (pydantic imported) about 0.5 s. cgroups
add no measurable cost. Most of that is CPython and pydantic start-up, not bubblewrap.
"""

from __future__ import annotations

import compileall
import errno
import hashlib
import json
import os
import pwd
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolhub.sandbox.cgroups import RunCgroups
from toolhub.sandbox.limits import Limits, SandboxOutcome, SandboxUnavailable
from toolhub.sandbox.seccomp import filter_program
from toolhub.sandbox.session import Session, outcome
from toolhub.sandbox.uids import UidPool

DEFAULT_SANDBOX_USER = "toolhub-sandbox"
DEFAULT_ARGV: tuple[str, ...] = ("/opt/env/bin/python", "-I", "/opt/runtime/main.py")
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")

SANDBOX_ENV_PATH = "/opt/env"
SANDBOX_RUNTIME_PATH = "/opt/runtime"
SANDBOX_SOURCE_PATH = "/opt/toolkit/toolkit.py"

# The environment bwrap itself runs with. The worker's own variables must never reach bwrap:
# without --as-pid-1, bwrap's reaper is pid 1 inside and its /proc/1/environ is readable there.
_BWRAP_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

# The environment of the sandboxed command.
_SANDBOX_ENV = {
    "PATH": "/opt/env/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "MALLOC_ARENA_MAX": "2",
}

# Namespaces and process hygiene, shared by every bwrap command line here. --unshare-all
# covers user, pid, network, IPC, UTS and cgroup; --unshare-user makes the user namespace
# compulsory rather than "if possible". With --as-pid-1 the command itself is pid 1 of its
# namespace, so bwrap waits for it directly; with bwrap's own reaper as pid 1, that reaper is
# left as a zombie for the host's init whenever a run ends.
_ISOLATION_ARGS = (
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--die-with-parent",
    "--new-session",
    "--as-pid-1",
)

# Files of the sandbox's /proc that tell about the host rather than the sandbox: the kernel's
# boot arguments, the keyrings' owners and keys, the kernel's symbols and configuration and the
# scheduler's and timers' debug views (which list host tasks). Each existing one is covered by
# /dev/null, which the sandbox can then not even open (its /proc forbids device files).
_PROC_MASKED = tuple(
    path
    for path in (
        "/proc/cmdline",
        "/proc/bootconfig",
        "/proc/keys",
        "/proc/key-users",
        "/proc/kallsyms",
        "/proc/config.gz",
        "/proc/sched_debug",
        "/proc/timer_list",
    )
    if os.path.exists(path)
)

# Top-level directories that a merged-usr system keeps as symlinks into /usr, and that a
# dynamically linked interpreter reaches through (the ELF loader lives at /lib64/...).
_USR_ALIASES = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(frozen=True)
class _Identity:
    bwrap: str
    uid: int
    gid: int
    switch: bool


# ---------------------------------------------------------------------------------------------
# Preconditions


def _resolve_bwrap(bwrap: str) -> str:
    found = shutil.which(bwrap) if os.sep not in bwrap else bwrap
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise SandboxUnavailable(
            f"bubblewrap is not installed (no executable {bwrap!r}). Install the Debian package "
            "`bubblewrap` (apt-get install bubblewrap). ToolHub never runs toolkit code "
            "outside the sandbox."
        )
    return os.path.abspath(found)


def _resolve_identity(*, bwrap: str, sandbox_user: str) -> _Identity:
    bwrap_path = _resolve_bwrap(bwrap)
    try:
        entry = pwd.getpwnam(sandbox_user)
    except KeyError:
        raise SandboxUnavailable(
            f"the sandbox user {sandbox_user!r} does not exist. Create it with "
            f"`useradd --system --no-create-home --shell /usr/sbin/nologin {sandbox_user}`."
        ) from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise SandboxUnavailable(f"the sandbox user {sandbox_user!r} has uid or gid 0; it must be unprivileged.")
    euid = os.geteuid()
    if euid != 0 and euid != entry.pw_uid:
        raise SandboxUnavailable(
            f"the worker runs as uid {euid}, which can neither switch to the sandbox user "
            f"{sandbox_user!r} nor is it: run the worker as root or as {sandbox_user!r}."
        )
    return _Identity(bwrap=bwrap_path, uid=entry.pw_uid, gid=entry.pw_gid, switch=euid == 0)


def check_sandbox(
    *,
    sandbox_user: str = DEFAULT_SANDBOX_USER,
    bwrap: str = "bwrap",
    probe: bool = True,
) -> None:
    """Raise ``SandboxUnavailable`` with the reason if sandboxed runs cannot work here.

    With ``probe`` an empty sandbox is really started (tens of milliseconds), which proves that
    unprivileged user namespaces are enabled.
    """
    identity = _resolve_identity(bwrap=bwrap, sandbox_user=sandbox_user)
    if not probe:
        return
    seccomp_fd = _seccomp_fd()
    argv = [identity.bwrap, *_ISOLATION_ARGS, "--clearenv", *_usr_args(), *_proc_args(), "--dev", "/dev"]
    argv += ["--seccomp", str(seccomp_fd), "--", "/usr/bin/true"]
    try:
        completed = subprocess.run(
            argv,
            check=False,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            close_fds=True,
            pass_fds=(seccomp_fd,),
            env=_BWRAP_ENV,
            cwd="/",
            timeout=30,
            **_privilege_kwargs(identity),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"bubblewrap could not be started: {exc}") from exc
    finally:
        os.close(seccomp_fd)
    if completed.returncode != 0:
        message = completed.stderr.decode("utf-8", "replace").strip()
        raise SandboxUnavailable(
            f"bubblewrap cannot create a sandbox as {sandbox_user!r}: {message or 'no message'}. "
            "Unprivileged user namespaces must be enabled (user.max_user_namespaces > 0)."
        )


def only_child(pid: int) -> int | None:
    """The one child of a live process of ours (bubblewrap's: the sandbox's pid 1), if any."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if len(children) == 1 else None


def _privilege_kwargs(identity: _Identity) -> dict:
    if not identity.switch:
        return {}
    return {"user": identity.uid, "group": identity.gid, "extra_groups": []}


# ---------------------------------------------------------------------------------------------
# The runtime copy


def ensure_runtime_copy(*, runtime_src: Path, data_dir: Path) -> Path:
    """Copy the runtime package to ``data_dir/runtime/<content hash>/`` and return that path.

    The copy has 0755 directories and 0644 files, so the sandbox user can read it wherever the
    repository lives, and is byte-compiled with ``/opt/runtime`` as the path tracebacks show.
    It is built beside its final place and renamed into it, so a half-written copy is never
    used; an existing copy with the same hash is reused.
    """
    files = _runtime_files(runtime_src)
    digest = hashlib.sha256()
    for relative in files:
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update((runtime_src / relative).read_bytes() + b"\0")
    parent = data_dir / "runtime"
    destination = parent / digest.hexdigest()[:20]
    if destination.is_dir():
        return destination
    for directory in (data_dir, parent):
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o755)
    _require_traversable(parent)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=parent))
    try:
        for relative in files:
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(runtime_src / relative, target)
        compileall.compile_dir(str(staging), quiet=1, ddir=SANDBOX_RUNTIME_PATH, workers=1, force=True)
        for root, dirs, names in os.walk(staging):
            os.chmod(root, 0o755)
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
            for name in names:
                os.chmod(os.path.join(root, name), 0o644)
        try:
            staging.rename(destination)
        except OSError as exc:
            # Another worker renamed the same content into place first; theirs is as good.
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return destination


def _runtime_files(runtime_src: Path) -> list[Path]:
    files = []
    for root, dirs, names in os.walk(runtime_src):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(names):
            path = Path(root) / name
            # Only regular files are copied: a symlink in the source tree could point anywhere.
            if path.suffix == ".pyc" or path.is_symlink() or not path.is_file():
                continue
            files.append(path.relative_to(runtime_src))
    if not files:
        raise FileNotFoundError(f"no runtime files under {runtime_src}")
    return files


def _require_traversable(path: Path) -> None:
    """Refuse a directory that users other than its owner cannot reach (bwrap runs as one)."""
    for directory in (path, *path.parents):
        if not os.stat(directory).st_mode & 0o001:
            raise SandboxUnavailable(
                f"{directory} is not traversable by other users (mode o+x missing), so the "
                "sandbox user cannot read the data directory below it."
            )


# ---------------------------------------------------------------------------------------------
# Building the bwrap command line


def _usr_args() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _USR_ALIASES:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    return args


def _proc_args() -> list[str]:
    args = ["--proc", "/proc"]
    for path in _PROC_MASKED:
        args += ["--ro-bind", "/dev/null", path]
    return args


def _seccomp_fd() -> int:
    """A descriptor, at offset 0, holding the seccomp program; bubblewrap reads it whole."""
    program = filter_program()
    fd = os.memfd_create("toolhub-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _interpreter_prefix(interpreter_env: Path) -> Path | None:
    """Return the base interpreter's prefix when it lives outside /usr and needs a bind."""
    try:
        config = (interpreter_env / "pyvenv.cfg").read_text()
    except OSError:
        return None
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            prefix = Path(value.strip()).resolve().parent
            if prefix == Path("/usr") or Path("/usr") in prefix.parents:
                return None
            return prefix
    return None


def _bwrap_argv(
    *,
    bwrap: str,
    interpreter_env: Path,
    runtime_dir: Path,
    source_fd: int,
    status_fd: int,
    seccomp_fd: int,
    limits: Limits,
    extra_binds: Sequence[tuple[Path, str]],
    argv: Sequence[str],
) -> list[str]:
    args = [bwrap, *_ISOLATION_ARGS, "--hostname", "sandbox", "--clearenv"]
    for name, value in _SANDBOX_ENV.items():
        args += ["--setenv", name, value]
    args += _usr_args()
    prefix = _interpreter_prefix(interpreter_env)
    if prefix is not None:
        args += ["--ro-bind", str(prefix), str(prefix)]
    args += [*_proc_args(), "--dev", "/dev"]
    args += ["--size", str(limits.tmp_bytes), "--tmpfs", "/tmp", "--size", str(limits.tmp_bytes), "--tmpfs", "/dev/shm"]
    args += ["--ro-bind", str(interpreter_env), SANDBOX_ENV_PATH, "--ro-bind", str(runtime_dir), SANDBOX_RUNTIME_PATH]
    args += ["--perms", "0444", "--ro-bind-data", str(source_fd), SANDBOX_SOURCE_PATH]
    for host_path, sandbox_path in extra_binds:
        args += ["--ro-bind", str(host_path), sandbox_path]
    # The new root and /dev are tmpfs mounts without a size cap; once everything is mounted
    # they become read-only so the code cannot fill memory through them.
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp"]
    args += ["--seccomp", str(seccomp_fd), "--json-status-fd", str(status_fd), "--", *argv]
    return args


def _child_setup(
    limits: Limits, cgroup_fds: Sequence[int], *, pids_cgroup: bool, own_uid: bool
) -> Callable[[], None]:
    """Return the function run in the child after the uid switch, right before exec."""
    # RLIMIT_NPROC counts every process of the uid on the host. A uid leased from a pool is
    # this run's alone, so the count is this run's: the limit itself without a pids cgroup
    # (``processes`` + 1 for bubblewrap), one above the cgroup's limit with one, so that the
    # cgroup, which reports being hit, is what stops a fork bomb. The shared sandbox user's
    # count covers every concurrent run: with a pids cgroup it is only a loose host-wide
    # backstop, without one it is the limit itself.
    if not pids_cgroup:
        nproc = limits.processes + 1
    elif own_uid:
        nproc = limits.processes + 2
    else:
        nproc = 8 * limits.processes
    rlimits = [
        # Soft and hard are equal: the command is pid 1 of its namespace, and pid 1 ignores
        # SIGXCPU, so the limit has to end in SIGKILL straight away.
        (resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds)),
        (resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes)),
        (resource.RLIMIT_NPROC, (nproc, nproc)),
        (resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)),
        (resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]

    def setup() -> None:
        # Joining the cgroups first puts bwrap and everything it starts inside them.
        pid = str(os.getpid()).encode()
        for fd in cgroup_fds:
            os.write(fd, pid)
        for which, values in rlimits:
            resource.setrlimit(which, values)

    return setup


# ---------------------------------------------------------------------------------------------
# Running


def run_sandboxed(
    *,
    interpreter_env: Path,
    runtime_dir: Path,
    source_path: Path,
    request: dict,
    limits: Limits,
    on_message: Callable[[dict], dict | None],
    sandbox_user: str = DEFAULT_SANDBOX_USER,
    bwrap: str = "bwrap",
    extra_binds: Sequence[tuple[Path, str]] = (),
    argv: Sequence[str] = DEFAULT_ARGV,
    cgroup_root: Path | None = DEFAULT_CGROUP_ROOT,
    uid_pool: UidPool | None = None,
    owned_paths: Sequence[Path] = (),
    cancel: threading.Event | None = None,
) -> SandboxOutcome:
    """Run ``argv`` in a new sandbox, exchange JSON lines with it, and say how it ended.

    Setting ``cancel`` (from another thread) kills the sandbox within a fraction of a second;
    the outcome's status is then "cancelled".

    ``owned_paths`` are handed to this run's uid before bubblewrap starts (chowned to it): the
    per-run egress socket (0600) and its directory (0700), so no other account can use them.

    With ``uid_pool`` the sandbox runs as a uid leased from it for this run alone
    (``toolhub.sandbox.uids``), and ``sandbox_user`` is not used.
    """
    if uid_pool is not None:
        with uid_pool.lease() as user:
            identity = _resolve_identity(bwrap=bwrap, sandbox_user=user.name)
            return _run(
                identity,
                own_uid=True,
                interpreter_env=interpreter_env,
                runtime_dir=runtime_dir,
                source_path=source_path,
                request=request,
                limits=limits,
                on_message=on_message,
                extra_binds=extra_binds,
                argv=argv,
                cgroup_root=cgroup_root,
                owned_paths=owned_paths,
                cancel=cancel,
            )
    identity = _resolve_identity(bwrap=bwrap, sandbox_user=sandbox_user)
    return _run(
        identity,
        own_uid=False,
        interpreter_env=interpreter_env,
        runtime_dir=runtime_dir,
        source_path=source_path,
        request=request,
        limits=limits,
        on_message=on_message,
        extra_binds=extra_binds,
        argv=argv,
        cgroup_root=cgroup_root,
        owned_paths=owned_paths,
        cancel=cancel,
    )


def _run(
    identity: _Identity,
    *,
    own_uid: bool,
    interpreter_env: Path,
    runtime_dir: Path,
    source_path: Path,
    request: dict,
    limits: Limits,
    on_message: Callable[[dict], dict | None],
    extra_binds: Sequence[tuple[Path, str]],
    argv: Sequence[str],
    cgroup_root: Path | None,
    owned_paths: Sequence[Path] = (),
    cancel: threading.Event | None = None,
) -> SandboxOutcome:
    source = Path(source_path).read_bytes()
    if identity.switch:
        for path in owned_paths:
            os.chown(path, identity.uid, identity.gid, follow_symlinks=False)
    request_line = json.dumps(request, separators=(",", ":")).encode() + b"\n"

    started = time.monotonic()
    cgroups = RunCgroups(cgroup_root, limits)
    process: subprocess.Popen | None = None
    session: Session | None = None
    fds: list[int] = []
    try:
        source_fd = os.memfd_create("toolkit-source", os.MFD_CLOEXEC)
        fds.append(source_fd)
        os.write(source_fd, source)
        os.lseek(source_fd, 0, os.SEEK_SET)
        status_read, status_write = os.pipe2(os.O_CLOEXEC)
        fds += [status_read, status_write]
        seccomp_fd = _seccomp_fd()
        fds.append(seccomp_fd)
        command = _bwrap_argv(
            bwrap=identity.bwrap,
            interpreter_env=Path(interpreter_env),
            runtime_dir=Path(runtime_dir),
            source_fd=source_fd,
            status_fd=status_write,
            seccomp_fd=seccomp_fd,
            limits=limits,
            extra_binds=extra_binds,
            argv=argv,
        )
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                close_fds=True,
                pass_fds=(source_fd, status_write, seccomp_fd),
                env=_BWRAP_ENV,
                cwd="/",
                umask=0o077,
                start_new_session=True,
                # The hook only joins cgroups and sets rlimits, calls that take no locks;
                # callers run one sandbox per thread (Celery prefork), see the docstring.
                preexec_fn=_child_setup(limits, cgroups.fds, pids_cgroup="pids" in cgroups.dirs, own_uid=own_uid),
                **_privilege_kwargs(identity),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"bubblewrap could not be started: {exc}") from exc
        # Only bubblewrap may hold the write end: its end of file says bubblewrap is gone.
        for fd in (status_write, source_fd, seccomp_fd):
            fds.remove(fd)
            os.close(fd)
        cgroups.close_fds()
        session = Session(process=process, status_fd=status_read, limits=limits, on_message=on_message, cancel=cancel)
        session.send(request_line)
        session.run()
        duration_ms = int((time.monotonic() - started) * 1000)
        oom = cgroups.oom_killed()
        pids_hit = cgroups.pids_limit_hit()
        cpu_ms = cgroups.cpu_ms()
    finally:
        if session is not None:
            session.close()
        elif process is not None:
            process.kill()
            process.wait()
        cgroups.kill_and_remove()
        for fd in fds:
            os.close(fd)

    state = session.state
    stderr_tail = state.stderr_tail.decode("utf-8", "replace")
    # bubblewrap reports an exit code only for a command it managed to start; without one,
    # and without a kill of ours, it failed while building the sandbox.
    if "exit-code" not in session.bwrap_status and state.killed_for is None and state.final is None:
        raise SandboxUnavailable(f"bubblewrap could not build the sandbox: {stderr_tail.strip() or 'no message'}")
    usage = session.usage
    if cpu_ms is None and usage is not None:
        cpu_ms = int((usage.ru_utime + usage.ru_stime) * 1000)
    exit_code = session.bwrap_status.get("exit-code")
    return outcome(
        state=state,
        exit_code=exit_code,
        stderr_tail=stderr_tail,
        oom=oom,
        pids_hit=pids_hit,
        cpu_ms=cpu_ms,
        limits=limits,
        duration_ms=duration_ms,
        max_rss_kb=usage.ru_maxrss if usage is not None else None,
        cgroups=cgroups.active,
    )
