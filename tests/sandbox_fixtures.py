"""Fixtures for tests that run code in the real bubblewrap sandbox (toolhub.sandbox.launcher).

They need what CI has: root (to switch to the sandbox user), bubblewrap, the
`toolhub-sandbox` user and Debian's `/usr/bin/python3.11`. Where one is missing the tests
are skipped with the reason, unless `TOOLHUB_REQUIRE_SANDBOX=1` is set (CI sets it), which
turns the skip into a failure so that a CI machine without bubblewrap cannot pass quietly.

- `sandbox_env`: a virtualenv with pydantic, readable by the sandbox user, built once per
  session with uv in a 0755 directory under /tmp. Wheels come from the offline wheelhouse
  when there is one (`$TOOLHUB_WHEELHOUSE`, `$TOOLHUB_DATA_DIR/wheelhouse`, `.data/wheelhouse`).
- `sandbox_data_dir`: a 0755 data directory under /tmp for the session.
- `sandbox_runtime`: the real runtime (toolhub/runtime) copied there by `ensure_runtime_copy`.
- `sandbox_processes()`: the processes the sandbox users (the shared one and this test run's
  range of the uid pool) own right now.
- `POOL_FIRST`: the first user of this test run's range of the uid pool: the suite's parts
  (scripts/run_tests.py) each take a range of their own (toolhub/settings_test.py), so a pool a
  test builds for itself must start there too.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings

from toolhub.sandbox import launcher as sandbox
from toolhub.sandbox import uids

REPO = Path(__file__).resolve().parent.parent
SANDBOX_USER = sandbox.DEFAULT_SANDBOX_USER
POOL_FIRST: int = settings.TOOLHUB_SANDBOX_UID_FIRST
# Only the part that runs the tests of the shared sandbox user looks for its processes (the
# `workers` part runs every sandbox as a pool uid of its own range).
_SHARED_USER_HERE = os.environ.get("TOOLHUB_TEST_PART") != "workers"
INTERPRETER = Path("/usr/bin/python3.11")
UV = REPO / ".venv" / "bin" / "uv"


def sandbox_unavailable_reason() -> str | None:
    """Why sandboxed tests cannot run on this machine, or None when they can."""
    if os.geteuid() != 0:
        return "switching to the sandbox user needs root"
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian package `bubblewrap`)"
    try:
        pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        return f"the {SANDBOX_USER} user does not exist"
    if not INTERPRETER.exists():
        return f"{INTERPRETER} is missing"
    if not UV.exists():
        return f"{UV} is missing"
    return None


def require_sandbox() -> None:
    """Skip the calling test, or fail it when CI demands the sandbox."""
    reason = sandbox_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("TOOLHUB_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"TOOLHUB_REQUIRE_SANDBOX=1 but {reason}")
    pytest.skip(reason)


def sandbox_user_names() -> list[str]:
    """The shared sandbox user (where this part runs its tests) and the users of this test run's
    range of the uid pool that exist on this machine."""
    names = [SANDBOX_USER] if _SHARED_USER_HERE else []
    size = max(settings.TOOLHUB_SANDBOX_UIDS, settings.TOOLHUB_TEST_UID_RANGE)
    names += [uids.user_name(number) for number in range(POOL_FIRST, POOL_FIRST + size)]
    return [name for name in names if _exists(name)]


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def sandbox_processes() -> list[str]:
    """`ps` lines of the live processes the sandbox users own in this process's cgroup subtree.

    On a CI machine that subtree is the whole machine. On a shared development machine the
    cgroup keeps out the sandboxes that other test sessions run at the same moment, while
    anything started by this session (which inherits its cgroup) is still seen.
    """
    result = subprocess.run(
        ["ps", "-u", ",".join(sandbox_user_names()) or SANDBOX_USER, "-o", "pid=,stat=,args="],
        capture_output=True,
        text=True,
        check=False,
    )
    own = _memory_cgroup("self")
    lines = []
    for line in result.stdout.splitlines():
        fields = line.split(maxsplit=2)
        # A zombie has ended; only its entry waits for the host's init to reap it (on this kind
        # of machine that init takes a second or more). It runs nothing and holds nothing open.
        if len(fields) >= 2 and fields[1].startswith("Z"):
            continue
        pid = fields[0] if fields else ""
        theirs = _memory_cgroup(pid)
        if own is None or theirs is None or theirs == own or theirs.startswith(own.rstrip("/") + "/"):
            lines.append(line.strip())
    return lines


def _memory_cgroup(pid: str) -> str | None:
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    return None


def wait_for_no_sandbox_processes(timeout: float = 1.0) -> list[str]:
    """Return the sandbox user's processes still there after `timeout` seconds (ideally none).

    The wait only absorbs the moment between bubblewrap's exit and `ps`; a process that
    escaped the kill (a `sleep 1000`) is still there after it.
    """
    deadline = time.monotonic() + timeout
    while True:
        left = sandbox_processes()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _wheelhouse() -> Path | None:
    candidates = [
        os.environ.get("TOOLHUB_WHEELHOUSE"),
        os.environ.get("TOOLHUB_DATA_DIR") and os.path.join(os.environ["TOOLHUB_DATA_DIR"], "wheelhouse"),
        str(REPO / ".data" / "wheelhouse"),
    ]
    for candidate in candidates:
        if candidate and any(Path(candidate).glob("pydantic-*.whl")):
            return Path(candidate)
    return None


def _open_to_others(root: Path) -> None:
    for directory, _dirs, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)


@contextmanager
def _environment(*requirements: str) -> Iterator[Path]:
    """A throwaway environment with pydantic and `requirements`, from the wheelhouse."""
    require_sandbox()
    base = Path(tempfile.mkdtemp(prefix="toolhub-sandbox-env-", dir="/tmp"))
    base.chmod(0o755)
    env_dir = base / "env"
    uv_env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(base),
        "UV_CACHE_DIR": str(base / "uv-cache"),
        "UV_NO_CONFIG": "1",
    }
    install = [
        "pip",
        "install",
        "--python",
        str(env_dir / "bin" / "python"),
        "--link-mode",
        "copy",
        "--compile-bytecode",
    ]
    wheelhouse = _wheelhouse()
    if wheelhouse is not None:
        install += ["--no-index", "--find-links", str(wheelhouse)]
    # TODO(lead): without a wheelhouse this reaches the network index; `make wheelhouse`
    # before the tests (CI does) keeps them offline.
    try:
        subprocess.run([str(UV), "venv", "-q", "--python", str(INTERPRETER), str(env_dir)], env=uv_env, check=True)
        subprocess.run([str(UV), *install, "-q", "pydantic>=2", *requirements], env=uv_env, check=True)
        shutil.rmtree(base / "uv-cache", ignore_errors=True)
        _open_to_others(env_dir)
        yield env_dir
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def sandbox_env() -> Iterator[Path]:
    with _environment() as env_dir:
        yield env_dir


@pytest.fixture(scope="session")
def sandbox_env_with_humanize() -> Iterator[Path]:
    """An environment with one package beyond the runtime's own (humanize, pure Python)."""
    with _environment("humanize") as env_dir:
        yield env_dir


@pytest.fixture(scope="session")
def sandbox_data_dir() -> Iterator[Path]:
    require_sandbox()
    directory = Path(tempfile.mkdtemp(prefix="toolhub-sandbox-data-", dir="/tmp"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def sandbox_runtime(sandbox_data_dir: Path) -> Path:
    return sandbox.ensure_runtime_copy(runtime_src=REPO / "toolhub" / "runtime", data_dir=sandbox_data_dir)
