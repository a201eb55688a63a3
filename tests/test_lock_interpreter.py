"""Locks are resolved for the interpreter the environment runs, not the worker's own.

Two CPython 3.11 builds of different patch releases: Debian's /usr/bin/python3.11 (the
default TOOLHUB_INTERPRETER) and another one on the machine (the interpreter the tests run
under, or a pyenv build). A package whose newest release needs `Requires-Python
>=<the newer patch>` — soupsieve 4.1.3 and beautifulsoup4 on 3.11.2 in real life — must be
locked at its older release for the older interpreter, and the lock must then install.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.env_fixtures import DemoIndex
from toolhub.packages import envbuild
from toolhub.packages.envbuild import (
    BuildFailed,
    IndexSettings,
    Timeouts,
    environment_python,
    interpreter_release,
    lock_package_names,
    lock_python,
)

DEBIAN = "/usr/bin/python3.11"
FAST = Timeouts(total_seconds=180, silence_seconds=90, network_seconds=5, network_retries=1)
# The other interpreter may live where the build user cannot reach it (a pyenv build under
# /root), so these tests of the library's interpreter handling run their steps unsandboxed;
# tests/test_environments.py runs the same steps in the build sandbox.
compile_lock = functools.partial(envbuild.compile_lock, sandbox=None)
ensure_environment = functools.partial(envbuild.ensure_environment, sandbox=None)


def _other_interpreter() -> str | None:
    """A 3.11 interpreter whose patch release differs from Debian's, if the machine has one."""
    candidates = [getattr(sys, "_base_executable", sys.executable), *sorted(
        str(path) for path in Path("/root/.pyenv/versions").glob("3.11.*/bin/python3.11")
    )]
    if not Path(DEBIAN).exists():
        return None
    ours = interpreter_release(DEBIAN)
    for candidate in candidates:
        if Path(candidate).exists():
            release = interpreter_release(candidate)
            if release.startswith("3.11.") and release != ours:
                return candidate
    return None


OTHER = _other_interpreter()
pytestmark = pytest.mark.skipif(OTHER is None, reason="needs two CPython 3.11 builds of different patch releases")


def _wheel(directory: Path, name: str, version: str, requires_python: str | None) -> None:
    """A pure-Python wheel that needs no build: METADATA, WHEEL, RECORD and one module."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    if requires_python:
        metadata += f"Requires-Python: {requires_python}\n"
    files = {
        f"{module}.py": f"VERSION = {version!r}\n".encode(),
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: toolhub-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(directory / f"{module}-{version}-py3-none-any.whl", "w") as archive:
        for path, data in files.items():
            archive.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), data)


@pytest.fixture(scope="module")
def index(demo_index: DemoIndex, tmp_path_factory: pytest.TempPathFactory) -> IndexSettings:
    """The demo wheelhouse plus `toolhub-demo-newpy`: 1.0 for any Python, 2.0 only for the
    newer of the two interpreters (like soupsieve 4.1.3's `Requires-Python >=3.11.5`)."""
    assert OTHER is not None
    extra = tmp_path_factory.mktemp("newpy")
    newer = max(interpreter_release(DEBIAN), interpreter_release(OTHER), key=lambda v: [int(p) for p in v.split(".")])
    _wheel(extra, "toolhub-demo-newpy", "1.0", None)
    _wheel(extra, "toolhub-demo-newpy", "2.0", f">={newer}")
    return IndexSettings(find_links=(str(demo_index.wheelhouse), str(extra)), no_index=True)


def _lock(index: IndexSettings, workdir: Path, interpreter: str) -> str:
    return compile_lock(
        requirements=["toolhub-demo-newpy"],
        constraints=[],
        index=index,
        log=lambda line: None,
        timeouts=FAST,
        workdir=workdir,
        interpreter=interpreter,
    )


def _pinned(lock: str, name: str) -> str:
    for line in lock.splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==")[1].split()[0]
    raise AssertionError(f"{name} is not pinned in the lock")


def _older_and_newer() -> tuple[str, str]:
    assert OTHER is not None
    pair = sorted([DEBIAN, OTHER], key=lambda i: [int(p) for p in interpreter_release(i).split(".")])
    return pair[0], pair[1]


def test_each_interpreter_gets_a_lock_for_its_own_release(index, tmp_path):
    older, newer = _older_and_newer()
    old_lock = _lock(index, tmp_path / "old", older)
    new_lock = _lock(index, tmp_path / "new", newer)
    assert _pinned(old_lock, "toolhub-demo-newpy") == "1.0"
    assert _pinned(new_lock, "toolhub-demo-newpy") == "2.0"
    # The lock records the release it was resolved for, on its first line.
    assert lock_python(old_lock) == interpreter_release(older)
    assert lock_python(new_lock) == interpreter_release(newer)
    assert old_lock.splitlines()[0] == f"# Resolved for Python {interpreter_release(older)}"
    assert "pydantic" in lock_package_names(old_lock)


def test_the_lock_for_the_older_release_installs_there_and_the_other_would_not(index, tmp_path):
    older, newer = _older_and_newer()
    if older != DEBIAN:
        pytest.skip("environments are built with Debian's interpreter (the sandbox user can read it)")
    root = tmp_path / "envs"
    path = ensure_environment(
        lock=_lock(index, tmp_path / "old", older), root=root, interpreter=older, index=index,
        log=lambda line: None, timeouts=FAST,
    )
    done = subprocess.run(
        [str(environment_python(path)), "-I", "-c", "import toolhub_demo_newpy, sys; print(toolhub_demo_newpy.VERSION, sys.version_info[:3])"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert done.stdout.split()[0] == "1.0"
    # What the worker's own Python would have locked does not install for the older one:
    # the bug this fixes.
    with pytest.raises(BuildFailed) as refused:
        ensure_environment(
            lock=_lock(index, tmp_path / "new", newer), root=root, interpreter=older, index=index,
            log=lambda line: None, timeouts=FAST,
        )
    # uv's summary of "toolhub-demo-newpy==2.0 needs a newer Python", as in the issue.
    assert str(refused.value) == "conflicting requirements"


def test_an_old_lock_without_the_line_has_no_release():
    assert lock_python("pydantic==2.14.4 \\\n    --hash=sha256:00\n") is None
    assert lock_python("# Resolved for Python three\n") is None
