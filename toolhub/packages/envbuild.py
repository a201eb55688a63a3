"""Locks and per-lock virtualenvs for toolkits, without Django.

A toolkit's requirements become a lock, and a lock becomes an isolated virtualenv that the
sandbox runs the toolkit in. Every setting arrives as an argument, so the Django models and
Celery tasks decide where settings come from and this module only does the work.

The API
-------
`compile_lock`, `lock_pins`, `lock_package_names`, `lock_python`, `IndexSettings`
    Locking: in `toolhub.packages.locks`, re-exported here.
`environment_key(lock=, interpreter=) -> str`
    sha256 over a format tag, the interpreter's `sys.version` and the lock.
`ensure_environment(lock=, root=, interpreter=, index=, log=, timeouts=, ...) -> Path`
    Returns `root/<key>`, building it first when it is missing. A build happens in
    `root/.tmp-<key>-<random>`: `uv venv --relocatable`, `uv pip install --require-hashes`,
    `compileall`, permissions opened to 0755/0644 for the sandbox user, the marker file
    (`MARKER_NAME`) written last, then one `rename` into place. A directory without the marker
    is never returned and is deleted by the next build of its key. One build per key at a time:
    an `flock` on `root/.locks/<key>.lock`; the others wait and then reuse its result.
`environment_python(path) -> Path`, `list_environments(root) -> list[EnvInfo]`,
`remove_environment(root, key) -> bool`, `remove_partial_builds(root) -> list[str]`
    For the worker and the management command that lists and prunes environments.

Every failure the lead has to show a user is a `BuildFailed` whose `reason` is one line
("No matching distribution for nonexistent-pkg", "no output for 300 s", "index unreachable:
127.0.0.1:9 (Connection refused)", "constraint humanize<3 contradicts requirement humanize>=4");
the full output went to `log` line by line as it arrived.

Subprocesses get an allowlisted environment: a fixed PATH, HOME and TMPDIR in a throwaway
directory, a UTF-8 locale, proxy variables if the worker has them, and the PIP_/UV_ settings
set here. Ambient pip and uv configuration files are ignored (`PIP_CONFIG_FILE=/dev/null`,
`UV_NO_CONFIG=1`) so that a build depends on its arguments only. Nothing else is inherited:
package builds run arbitrary code, and the worker's SECRET_KEY or broker URL is not theirs.

With a `sandbox` (`toolhub.sandbox.build.BuildSandbox`; the worker always passes one) every
step runs in bubblewrap as the build user and sees only: ToolHub's own virtualenv (pip-tools,
uv), the interpreter, the local wheelhouses and file:// indexes and the CA bundle of
`IndexSettings`, read-only; its own scratch directory, the environment being built and the
download cache, read-write. The lock and the install reach, through a proxy, exactly the index
hosts of the settings that are not on this host (`IndexSettings.index_hosts`), nothing when
every index and wheelhouse is local; creating the virtualenv and byte-compiling it (where a
wheel's `.pth` code runs) never have any. The finished environment is given back to the worker's account before it is published.
`sandbox=None` runs the steps directly, for tests of this module alone.

Binary-only (`IndexSettings.only_binary`) refuses every source distribution except those of
`IndexSettings.source_packages` (the packages an admin allowed to build from source), which are
then built from source (pip's and uv's `--no-binary`); a package with no fitting wheel fails
with `SourceBuildRefused`, which names it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from toolhub.packages.build_runner import (
    BuildFailed,
    Log,
    SourceBuildRefused,
    Timeouts,
    find_tool,
    run_logged,
    tool_env,
)
from toolhub.packages.locks import (
    BASE_REQUIREMENTS,
    DEFAULT_INTERPRETER,
    LOCK_PYTHON_PREFIX,
    IndexSettings,
    compile_lock,
    confine,
    interpreter_release,
    interpreter_version,
    lock_package_names,
    lock_pins,
    lock_python,
    step_failure,
)
from toolhub.sandbox.build import BuildSandbox

__all__ = [
    "BASE_REQUIREMENTS",
    "DEFAULT_INTERPRETER",
    "LOCK_PYTHON_PREFIX",
    "MARKER_NAME",
    "BuildFailed",
    "BuildSandbox",
    "EnvInfo",
    "IndexSettings",
    "Timeouts",
    "compile_lock",
    "ensure_environment",
    "environment_key",
    "environment_python",
    "finished_environment",
    "interpreter_release",
    "interpreter_version",
    "lock_python",
    "list_environments",
    "lock_package_names",
    "lock_pins",
    "remove_environment",
    "remove_partial_builds",
    "SourceBuildRefused",
]

# Written last into a finished environment; its absence means "never use this directory".
MARKER_NAME = "toolhub-environment.json"
LOCK_COPY_NAME = "toolhub-lock.txt"

# Part of every key. Change it when the way environments are built changes, so that hosts
# build fresh environments instead of reusing ones made the old way.
_KEY_FORMAT = "toolhub-environment-v1"
_KEY_PATTERN = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class EnvInfo:
    key: str
    path: Path
    interpreter: str
    python_version: str
    created_at: datetime
    # The marker's mtime, which every ensure_environment call on this host refreshes.
    last_used_at: datetime
    size_bytes: int


# --------------------------------------------------------------------------------------------
# Environments


def environment_key(*, lock: str, interpreter: str) -> str:
    return _environment_key(interpreter_version(interpreter), lock)


@lru_cache(maxsize=64)
def _environment_key(version: str, lock: str) -> str:
    # Asked before every run (environment_ensure): normalising and hashing a lock of a few
    # hundred lines took ~0.1 ms a call.
    digest = hashlib.sha256()
    digest.update(f"{_KEY_FORMAT}\n{version}\n".encode())
    digest.update(_normalise_lock(lock).encode())
    return digest.hexdigest()


def existing_environment(*, lock: str, root: Path, interpreter: str) -> Path | None:
    """The finished environment of this lock under root, or None; never builds one."""
    key = environment_key(lock=lock, interpreter=interpreter)
    return root / key if _is_complete(root / key, key) else None


def environment_python(path: Path) -> Path:
    return path / "bin" / "python"


# What finished_environment found last, per lock, interpreter and root, in this process, and
# when. A worker asks before every tool call, and the whole check (the interpreter's
# permissions, the marker read and parsed, the last use recorded) was 0.3-0.6 ms of a warm
# call's path. The answer is given again while its marker is still in place (an environment
# is removed by renaming it away first) and for at most FINISHED_RECHECK_SECONDS; then the
# whole check runs, and marks the environment used, again.
FINISHED_RECHECK_SECONDS = 60.0
_FINISHED_MAX = 256
_finished: dict[tuple[str, str, str], tuple[Path, float]] = {}


def finished_environment(*, lock: str, root: Path, interpreter: str, log: Log) -> Path | None:
    """The finished environment of this lock on this host, or None when it has to be built
    (ensure_environment's first step, which needs no index settings)."""
    found = (lock, interpreter, str(root))
    known = _finished.get(found)
    if known is not None and time.monotonic() - known[1] < FINISHED_RECHECK_SECONDS:
        if os.path.exists(known[0] / MARKER_NAME):
            log(f"environment {known[0].name} is ready; reusing it")
            return known[0]
    _finished.pop(found, None)
    _check_readable_by_others(interpreter)
    key = environment_key(lock=lock, interpreter=interpreter)
    final = root / key
    if not _is_complete(final, key):
        return None
    _mark_used(final)
    log(f"environment {key} is ready; reusing it")
    if len(_finished) >= _FINISHED_MAX:
        _finished.clear()
    _finished[found] = (final, time.monotonic())
    return final


def ensure_environment(
    *,
    lock: str,
    root: Path,
    interpreter: str,
    index: IndexSettings,
    log: Log,
    timeouts: Timeouts,
    cache_dir: Path | None = None,
    sandbox: BuildSandbox | None,
) -> Path:
    """Return the finished environment for this lock, building it on this host if needed.

    `cache_dir` is uv's cache; it defaults to `root/.cache` so rebuilds on one host reuse
    downloads. Waiting for another process's build of the same key is bounded by
    `timeouts.total_seconds` plus a minute; the build itself has its own full budget.
    """
    ready = finished_environment(lock=lock, root=root, interpreter=interpreter, log=log)
    if ready is not None:
        return ready
    key = environment_key(lock=lock, interpreter=interpreter)
    final = root / key
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    (root / ".locks").mkdir(exist_ok=True)
    with _key_lock(root, key, wait_seconds=timeouts.total_seconds + 60, log=log):
        if _is_complete(final, key):
            _mark_used(final)
            log(f"environment {key} was built meanwhile; reusing it")
            return final
        _discard_unfinished(root, key, log)
        return _build(
            lock=_normalise_lock(lock),
            key=key,
            root=root,
            interpreter=interpreter,
            index=index,
            log=log,
            timeouts=timeouts,
            cache_dir=cache_dir or root / ".cache",
            sandbox=sandbox,
        )


def _build(
    *,
    lock: str,
    key: str,
    root: Path,
    interpreter: str,
    index: IndexSettings,
    log: Log,
    timeouts: Timeouts,
    cache_dir: Path,
    sandbox: BuildSandbox | None,
) -> Path:
    deadline = time.monotonic() + timeouts.total_seconds
    final = root / key
    partial = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    log(f"building environment {key} in {partial.name}")
    try:
        # Named after this process, so a worker starting after it died removes it
        # (toolhub.sandbox.scratch.sweep_dead knows the prefix).
        with tempfile.TemporaryDirectory(prefix=f"toolhub-build-{os.getpid()}-") as scratch:
            lock_file = Path(scratch) / "requirements.txt"
            lock_file.write_text(lock)
            env = tool_env(home=Path(scratch), timeouts=timeouts, extra=index.env())
            env["UV_CACHE_DIR"] = str(cache_dir)
            cache_dir.mkdir(parents=True, exist_ok=True)
            confined = confine(
                sandbox, index=index, interpreter=interpreter, owned=(Path(scratch), partial, cache_dir)
            )

            def step(argv: list[str], tool: str, *, network: Sequence[tuple[str, int]], writable: Sequence[Path]) -> None:
                result = run_logged(
                    argv,
                    env=env,
                    cwd=Path(scratch),
                    log=log,
                    deadline=deadline,
                    timeouts=timeouts,
                    stage="build",
                    sandbox=confined,
                    writable=(Path(scratch), *writable),
                    network=network,
                )
                if result.returncode != 0:
                    raise step_failure(tool, result, index)

            uv = str(find_tool("uv"))
            # Relocatable: scripts and activation files must not remember the temporary path.
            step(
                [uv, "venv", "--no-project", "--relocatable", "--python", interpreter, str(partial)],
                "uv venv",
                network=(),
                # uv opens its cache in every command: unbound, it exists in the sandbox only
                # when the data directory is under /tmp (the sandbox's own tmpfs).
                writable=[partial, cache_dir],
            )
            python = str(environment_python(partial))
            step(
                [
                    uv,
                    "pip",
                    "install",
                    "--python",
                    python,
                    "--require-hashes",
                    *index.uv_args(),
                    "--requirements",
                    str(lock_file),
                ],
                "uv pip install",
                network=index.index_hosts(),
                writable=[partial, cache_dir],
            )
            # The sandbox runs with PYTHONDONTWRITEBYTECODE on a read-only mount, so compile
            # now or pay for it on every start. -s/-p record the final path in the .pyc files.
            step(
                [
                    python,
                    "-I",
                    "-m",
                    "compileall",
                    "-q",
                    "-j",
                    "0",
                    "-s",
                    str(partial),
                    "-p",
                    str(final),
                    str(partial / "lib"),
                ],
                "compileall",
                network=(),
                writable=[partial],
            )
        if confined is not None:
            confined.reclaim(partial)
        # The build may have left a symlink under either name; these files are the worker's.
        (partial / LOCK_COPY_NAME).unlink(missing_ok=True)
        (partial / MARKER_NAME).unlink(missing_ok=True)
        (partial / LOCK_COPY_NAME).write_text(lock)
        _open_permissions(partial)
        _write_marker(partial, key=key, interpreter=interpreter)
        os.rename(partial, final)
        _fsync_directory(root)
    except BaseException:
        # Whatever stopped the build (a failure, a timeout, Celery's soft time limit), the
        # half-built directory goes now rather than waiting for the next attempt.
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log(f"environment {key} is ready")
    return final


def list_environments(root: Path) -> list[EnvInfo]:
    """The finished environments under root, oldest first."""
    found: list[EnvInfo] = []
    if not root.is_dir():
        return found
    for child in root.iterdir():
        if not _KEY_PATTERN.fullmatch(child.name) or child.is_symlink():
            continue
        marker = child / MARKER_NAME
        try:
            data = json.loads(marker.read_text())
            used = marker.stat().st_mtime
        except (OSError, ValueError):
            continue
        found.append(
            EnvInfo(
                key=child.name,
                path=child,
                interpreter=data["interpreter"],
                python_version=data["python_version"],
                created_at=datetime.fromisoformat(data["created_at"]),
                last_used_at=datetime.fromtimestamp(used, UTC),
                size_bytes=_tree_size(child),
            )
        )
    return sorted(found, key=lambda info: info.created_at)


def remove_environment(root: Path, key: str) -> bool:
    """Delete one environment (and any unfinished build of it); True if it existed.

    Waits for a running build of the same key. The directory is first renamed out of the
    way, so no reader ever sees a half-deleted environment that still has its marker.
    """
    if not _KEY_PATTERN.fullmatch(key):
        raise ValueError(f"not an environment key: {key!r}")
    final = root / key
    if not final.exists() and not any(root.glob(f".tmp-{key}-*")):
        return False
    existed = final.is_dir()
    with _key_lock(root, key, wait_seconds=3600, log=lambda line: None):
        _discard_unfinished(root, key, lambda line: None)
        if final.is_dir():
            _discard(final)
    return existed


def remove_partial_builds(root: Path) -> list[str]:
    """Delete leftovers of killed builds whose key nobody is building now; return their names."""
    removed: list[str] = []
    if not root.is_dir():
        return removed
    for child in sorted(root.iterdir()):
        if child.name.startswith(".trash-"):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
            continue
        match = re.fullmatch(r"\.tmp-([0-9a-f]{64})-.*", child.name)
        if not match:
            continue
        with _try_key_lock(root, match.group(1)) as locked:
            if locked:
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child.name)
    return removed


def _normalise_lock(lock: str) -> str:
    # Databases and forms like to turn "\n" into "\r\n" or drop the final newline; neither
    # should name a different environment.
    return "\n".join(line.rstrip() for line in lock.strip().splitlines()) + "\n"


def _is_complete(path: Path, key: str) -> bool:
    try:
        return json.loads((path / MARKER_NAME).read_text()).get("key") == key
    except (OSError, ValueError, AttributeError):
        return False


def _mark_used(path: Path) -> None:
    # Best effort: the data directory may be mounted read-only on some hosts.
    with contextlib.suppress(OSError):
        os.utime(path / MARKER_NAME)


def _write_marker(path: Path, *, key: str, interpreter: str) -> None:
    data = {
        "key": key,
        "interpreter": interpreter,
        "python_version": interpreter_version(interpreter),
        "created_at": datetime.now(UTC).isoformat(),
    }
    marker = path / MARKER_NAME
    with open(marker, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.flush()
        # The rename that publishes the environment must not reach the disk before this.
        os.fsync(handle.fileno())
    marker.chmod(0o644)


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_permissions(top: Path) -> None:
    """Directories 0755, files 0644 or 0755 if executable at all; symlinks untouched.

    The sandbox user owns none of these files, so this lets it read and never write. chmod
    follows symlinks, and bin/python points at the system interpreter, hence the lstat.
    """
    for directory, _subdirs, files in os.walk(top):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, 0o755 if mode & 0o111 else 0o644)


def _check_readable_by_others(interpreter: str) -> None:
    """Refuse an interpreter the unprivileged sandbox user could not start."""
    for path in (Path(interpreter).absolute(), Path(interpreter).resolve()):
        try:
            if not path.stat().st_mode & stat.S_IXOTH:
                raise BuildFailed(f"interpreter {path} is not executable by other users")
            for parent in path.parents:
                if not parent.stat().st_mode & stat.S_IXOTH:
                    raise BuildFailed(
                        f"interpreter {interpreter} is not usable by the sandbox user: "
                        f"{parent} is not searchable by other users"
                    )
        except FileNotFoundError:
            raise BuildFailed(f"interpreter {interpreter} not found") from None


def _tree_size(top: Path) -> int:
    total = 0
    for directory, _subdirs, files in os.walk(top):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


def _discard(path: Path) -> None:
    """Rename path to a .trash- sibling (atomic), then delete it."""
    trash = Path(tempfile.mkdtemp(prefix=".trash-", dir=path.parent))
    os.rename(path, trash / path.name)
    shutil.rmtree(trash, ignore_errors=True)


def _discard_unfinished(root: Path, key: str, log: Log) -> None:
    """Delete earlier, unfinished builds of key. Only call this while holding key's lock."""
    for leftover in root.glob(f".tmp-{key}-*"):
        log(f"removing unfinished build {leftover.name}")
        shutil.rmtree(leftover, ignore_errors=True)
    final = root / key
    if final.exists() and not _is_complete(final, key):
        log(f"removing {key}, which has no completion marker")
        _discard(final)


@contextlib.contextmanager
def _key_lock(root: Path, key: str, *, wait_seconds: float, log: Log) -> Iterator[None]:
    """Hold an exclusive flock for key; the kernel drops it if this process dies."""
    (root / ".locks").mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".locks" / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another process is building environment {key}; waiting for it")
            give_up = time.monotonic() + wait_seconds
            while True:
                time.sleep(0.1)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > give_up:
                        raise BuildFailed(f"waited {wait_seconds:g} s for another build of this environment") from None
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _try_key_lock(root: Path, key: str) -> Iterator[bool]:
    """Like _key_lock without waiting: yields whether the lock was free (and is now held)."""
    (root / ".locks").mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".locks" / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(fd)
