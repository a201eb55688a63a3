"""toolhub.packages.envbuild: locks, per-lock virtualenvs, and the command runner under them.

Everything runs offline against the wheelhouse from tests/env_fixtures.py (`demo_index`).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.env_fixtures import DemoIndex, traversable
from tests.sandbox_fixtures import require_sandbox
from toolhub.packages import build_runner
from toolhub.packages import envbuild as environments
from toolhub.packages.envbuild import (
    MARKER_NAME,
    BuildFailed,
    BuildSandbox,
    IndexSettings,
    SourceBuildRefused,
    Timeouts,
    environment_key,
    environment_python,
    list_environments,
    lock_package_names,
    remove_environment,
    remove_partial_builds,
)

pytestmark = pytest.mark.sandbox

INTERPRETER = "/usr/bin/python3.11"
# Short network limits, so that the tests about an unreachable index finish quickly.
FAST = Timeouts(total_seconds=120, silence_seconds=60, network_seconds=5, network_retries=1)
UNREACHABLE = IndexSettings(index_url="http://127.0.0.1:9/simple")
def compile_lock(**kwargs):
    """Every lock here is made in the build sandbox, as the worker's are."""
    traversable(kwargs["workdir"].parent)
    return environments.compile_lock(sandbox=BuildSandbox(), **kwargs)


def ensure_environment(**kwargs):
    """Every environment here is built in the build sandbox, as the worker's are."""
    traversable(kwargs["root"].parent)
    return environments.ensure_environment(sandbox=BuildSandbox(), **kwargs)


class Log(list[str]):
    """A `log` callback that keeps the lines."""

    def __call__(self, line: str) -> None:
        self.append(line)

    def commands(self) -> list[str]:
        return [line for line in self if line.startswith("$ ")]


def lock_for(index: DemoIndex, workdir: Path, requirements: list[str], constraints=()) -> str:
    return compile_lock(
        requirements=requirements,
        constraints=list(constraints),
        index=index.settings,
        log=Log(),
        timeouts=FAST,
        workdir=workdir,
    )


def ensure(index: IndexSettings, lock: str, root: Path, log=None, timeouts=FAST) -> Path:
    return ensure_environment(
        lock=lock,
        root=root,
        interpreter=INTERPRETER,
        index=index,
        log=log if log is not None else Log(),
        timeouts=timeouts,
    )


def leftovers(root: Path) -> list[str]:
    """Everything under root except finished environments and the lock and cache folders."""
    return sorted(
        p.name for p in root.iterdir() if p.name not in {".locks", ".cache"} and not (p / MARKER_NAME).exists()
    )


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def wait_until_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A zombie still answers kill(0); it has exited all the same.
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def lock_a(demo_index: DemoIndex, tmp_path_factory: pytest.TempPathFactory) -> str:
    return lock_for(demo_index, tmp_path_factory.mktemp("lock-a"), ["toolhub-demo-a"])


@pytest.fixture
def slow_lock(slow_gate: DemoIndex, tmp_path_factory: pytest.TempPathFactory) -> str:
    return lock_for(slow_gate, tmp_path_factory.mktemp("lock-slow"), ["toolhub-demo-slow"])


# --------------------------------------------------------------------------------------------
# Locks


def test_it_locks_with_hashes_and_the_base_requirements(lock_a: str) -> None:
    names = lock_package_names(lock_a)
    assert {"toolhub-demo-a", "toolhub-demo-b", "pydantic", "pydantic-core"} <= set(names)
    pins = [line for line in lock_a.splitlines() if "==" in line]
    assert all(line.endswith("\\") for line in pins)
    assert lock_a.count("--hash=sha256:") >= len(pins)
    assert "toolhub-demo-b==2.0" in lock_a


def test_the_lock_names_no_index_and_no_local_path(lock_a: str) -> None:
    # The lock is hashed into the environment key and rebuilt on other hosts, so it must not
    # carry this host's index settings or temporary paths.
    for word in ("--find-links", "--index-url", "--no-index", "wheelhouse", "/tmp", "pip-compile"):
        assert word not in lock_a


def test_it_applies_constraints(demo_index: DemoIndex, tmp_path: Path) -> None:
    lock = lock_for(demo_index, tmp_path, ["toolhub-demo-a"], ["toolhub-demo-b<2"])
    assert "toolhub-demo-b==1.0" in lock


def test_it_logs_the_command_and_its_output(demo_index: DemoIndex, tmp_path: Path) -> None:
    log = Log()
    compile_lock(
        requirements=["toolhub-demo-b"],
        constraints=[],
        index=demo_index.settings,
        log=log,
        timeouts=FAST,
        workdir=tmp_path,
    )
    [command] = log.commands()
    # pip-compile runs under the environment's interpreter (tests/test_lock_interpreter.py).
    assert f"$ {INTERPRETER} -S {build_runner.find_tool('pip-compile')} --generate-hashes" in command
    assert f"--find-links {demo_index.wheelhouse}" in command
    assert any("toolhub-demo-b==2.0" in line for line in log)


def test_the_same_inputs_give_the_same_lock(demo_index: DemoIndex, tmp_path: Path) -> None:
    first = lock_for(demo_index, tmp_path / "one", ["toolhub-demo-a", "humanize"])
    second = lock_for(demo_index, tmp_path / "two", ["humanize", "toolhub-demo-a"])
    assert first == second


def test_lock_package_names_reads_pins_with_markers_and_comments() -> None:
    lock = (
        "Foo_Bar==1.0 \\\n    --hash=sha256:aa\n    # via -r requirements.in\n"
        'baz[extra]==2 ; python_version >= "3.8" \\\n    --hash=sha256:bb\n'
        "# a comment\n--index-url https://example.invalid/simple\n"
    )
    assert lock_package_names(lock) == ["baz", "foo-bar"]


@pytest.mark.parametrize(
    "requirement",
    [
        "humanize\n--index-url http://evil.invalid/simple",
        "--extra-index-url=http://evil.invalid/simple",
        "-e .",
        "humanize @ https://evil.invalid/humanize.whl",
        "not a requirement!",
        "",
    ],
)
def test_it_refuses_requirements_that_smuggle_options(requirement: str, demo_index: DemoIndex, tmp_path: Path) -> None:
    log = Log()
    with pytest.raises(BuildFailed) as failure:
        compile_lock(
            requirements=[requirement],
            constraints=[],
            index=demo_index.settings,
            log=log,
            timeouts=FAST,
            workdir=tmp_path,
        )
    assert "requirement" in failure.value.reason
    assert log.commands() == []


def test_it_reports_a_requirement_that_does_not_resolve(demo_index: DemoIndex, tmp_path: Path) -> None:
    log = Log()
    with pytest.raises(BuildFailed) as failure:
        compile_lock(
            requirements=["nonexistent-pkg"],
            constraints=[],
            index=demo_index.settings,
            log=log,
            timeouts=FAST,
            workdir=tmp_path,
        )
    assert failure.value.reason == "No matching distribution for nonexistent-pkg"
    # The full story is in the log, the summary in the reason.
    assert any("nonexistent-pkg" in line for line in log[1:])


def test_it_reports_a_package_whose_metadata_does_not_build(demo_index: DemoIndex, tmp_path: Path) -> None:
    log = Log()
    with pytest.raises(BuildFailed) as failure:
        compile_lock(
            requirements=["toolhub-demo-nometa"],
            constraints=[],
            index=demo_index.settings,
            log=log,
            timeouts=FAST,
            workdir=tmp_path,
        )
    assert failure.value.reason == (
        "toolhub-demo-nometa failed to build: RuntimeError: toolhub-demo-nometa has no metadata to give"
    )
    assert any("made to fail its metadata" in line for line in log)


def test_it_reports_a_constraint_that_contradicts_the_requirement(demo_index: DemoIndex, tmp_path: Path) -> None:
    with pytest.raises(BuildFailed) as failure:
        lock_for(demo_index, tmp_path, ["humanize>=4"], ["humanize<3"])
    assert failure.value.reason == "constraint humanize<3 contradicts requirement humanize>=4"


def test_it_reports_a_constraint_that_contradicts_a_dependency(demo_index: DemoIndex, tmp_path: Path) -> None:
    with pytest.raises(BuildFailed) as failure:
        lock_for(demo_index, tmp_path, ["toolhub-demo-a"], ["toolhub-demo-b<1"])
    assert failure.value.reason == (
        "constraint toolhub-demo-b<1 contradicts toolhub-demo-a 1.0, which requires toolhub-demo-b>=1"
    )


def test_it_reports_an_unreachable_index_quickly(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(BuildFailed) as failure:
        compile_lock(
            requirements=["humanize"],
            constraints=[],
            index=UNREACHABLE,
            log=Log(),
            timeouts=FAST,
            workdir=tmp_path,
        )
    assert failure.value.reason == "index unreachable: 127.0.0.1:9 (Connection refused)"
    assert time.monotonic() - started < 20


def test_only_binary_refuses_source_distributions(demo_index: DemoIndex, tmp_path: Path) -> None:
    settings = IndexSettings(find_links=(str(demo_index.wheelhouse),), no_index=True, only_binary=True)
    with pytest.raises(SourceBuildRefused) as failure:
        compile_lock(
            requirements=["toolhub-demo-nometa"],
            constraints=[],
            index=settings,
            log=Log(),
            timeouts=FAST,
            workdir=tmp_path,
        )
    # Its metadata hook would have failed had it run; the failure says how to allow it.
    assert failure.value.name == "toolhub-demo-nometa"
    assert failure.value.reason.startswith("No wheel of toolhub-demo-nometa fits, and building from source is off")
    assert "allow a source build of toolhub-demo-nometa in the package queue" in failure.value.reason


@pytest.mark.slow
def test_only_binary_builds_the_allowed_packages_from_source(demo_index: DemoIndex, tmp_path: Path) -> None:
    # toolhub-demo-a and -b stay wheels; toolhub-demo-broken, allowed, is built from source
    # (its build hook runs and fails), in the lock's metadata step and then in the install.
    settings = IndexSettings(
        find_links=(str(demo_index.wheelhouse),), no_index=True, only_binary=True,
        source_packages=("toolhub-demo-broken",),
    )
    lock = compile_lock(
        requirements=["toolhub-demo-a", "toolhub-demo-broken"], constraints=[], index=settings, log=Log(),
        timeouts=FAST, workdir=tmp_path / "work",
    )
    assert {"toolhub-demo-a", "toolhub-demo-b", "toolhub-demo-broken"} <= set(lock_package_names(lock))
    log = Log()
    with pytest.raises(BuildFailed) as failure:
        ensure(settings, lock, tmp_path / "envs", log=log)
    assert failure.value.reason == "toolhub-demo-broken failed to build: RuntimeError: toolhub-demo-broken refuses to build"
    [install] = [line for line in log.commands() if "uv pip install" in line]
    assert "--only-binary=:all: --no-binary=toolhub-demo-broken" in install


@pytest.mark.slow
def test_it_ignores_ambient_pip_configuration(
    demo_index: DemoIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Machines like this one carry pip settings in files and variables; a build must not
    # pick up an index or wheelhouse from them.
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = http://127.0.0.1:9/from-config\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/from-env")
    monkeypatch.setenv("PIP_FIND_LINKS", "/nonexistent/wheels")
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/from-env")
    log = Log()
    lock = compile_lock(
        requirements=["toolhub-demo-b"],
        constraints=[],
        index=demo_index.settings,
        log=log,
        timeouts=FAST,
        workdir=tmp_path / "work",
    )
    assert "toolhub-demo-b==2.0" in lock
    env = ensure(demo_index.settings, lock, tmp_path / "envs", log=log)
    assert (env / MARKER_NAME).exists()
    assert not any("127.0.0.1:9" in line or "/nonexistent" in line for line in log)


# --------------------------------------------------------------------------------------------
# Environments


@pytest.mark.slow
def test_it_builds_an_environment_that_imports_the_package(demo_index: DemoIndex, lock_a: str, tmp_path: Path) -> None:
    root = tmp_path / "envs"
    env = ensure(demo_index.settings, lock_a, root)

    assert env == root / environment_key(lock=lock_a, interpreter=INTERPRETER)
    done = subprocess.run(
        [
            environment_python(env),
            "-I",
            "-c",
            "import toolhub_demo_a, pydantic; print(toolhub_demo_a.greet(), pydantic.VERSION[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "a sees b2 2\n"
    # Console scripts work from the final path although they were installed elsewhere.
    script = subprocess.run([env / "bin" / "toolhub-demo-a"], capture_output=True, text=True)
    assert script.stdout == "a sees b2\n"
    assert leftovers(root) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs")
def test_a_full_disk_is_named_as_the_cause_of_a_failed_build(demo_index: DemoIndex, lock_a: str) -> None:
    """A real full disk: the environments' directory on a tmpfs of 1 MiB, too small for the
    lock's wheels. The reason says so instead of only the tool's last words."""
    base = Path(tempfile.mkdtemp(prefix="toolhub-full-", dir="/var/tmp"))
    try:
        traversable(base)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0711", "tmpfs", str(base)], check=True)
        try:
            with pytest.raises(BuildFailed) as failed:
                ensure(demo_index.settings, lock_a, base / "envs")
        finally:
            subprocess.run(["umount", "-l", str(base)], check=False)
        assert "the disk is full on this host (No space left on device)" in failed.value.reason
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_it_builds_an_environment_in_a_data_directory_outside_tmp(demo_index: DemoIndex, lock_a: str) -> None:
    """The container image's data directory is /var/lib/toolhub, `make run`'s is in the
    checkout: outside /tmp, which is the build sandbox's own tmpfs, uv's cache exists in the
    sandbox only where it is bound, in every step (`uv venv` too: "Failed to initialize cache")."""
    base = Path(tempfile.mkdtemp(prefix="toolhub-envs-", dir="/var/tmp"))
    try:
        traversable(base)
        env = ensure(demo_index.settings, lock_a, base / "envs")
        done = subprocess.run([environment_python(env), "-I", "-c", "import toolhub_demo_a"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_the_environment_is_byte_compiled_and_mentions_no_temporary_path(
    demo_index: DemoIndex, lock_a: str, tmp_path: Path
) -> None:
    env = ensure(demo_index.settings, lock_a, tmp_path / "envs")
    package = next(env.glob("lib/python3*/site-packages/toolhub_demo_a"))
    assert list((package / "__pycache__").glob("__init__.cpython-311.pyc"))
    assert list(env.glob("lib/python3*/site-packages/pydantic/__pycache__/main.cpython-311.pyc"))
    for path in env.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert b".tmp-" not in path.read_bytes(), path


@pytest.mark.slow
def test_the_environment_is_readable_and_not_writable_by_others(
    demo_index: DemoIndex, lock_a: str, tmp_path: Path
) -> None:
    env = ensure(demo_index.settings, lock_a, tmp_path / "envs")
    for path in [env, *env.rglob("*")]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        if path.is_dir():
            assert stat.S_IMODE(mode) == 0o755, path
        else:
            assert stat.S_IMODE(mode) in (0o644, 0o755), path
    assert stat.S_IMODE((env / "bin" / "toolhub-demo-a").stat().st_mode) == 0o755
    # chmod must not have followed bin/python into the system interpreter.
    assert stat.S_IMODE(os.stat(INTERPRETER).st_mode) == 0o755


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_sandbox_user_can_import_from_the_environment(demo_index: DemoIndex, lock_a: str) -> None:
    # Switching to the sandbox user needs root and the user; CI requires both.
    require_sandbox()
    # pytest's temporary directories are private to root; this one is traversable like the
    # data directory has to be.
    top = Path(tempfile.mkdtemp(prefix="toolhub-env-test-"))
    try:
        top.chmod(0o755)
        env = ensure(demo_index.settings, lock_a, top / "envs")
        done = subprocess.run(
            [environment_python(env), "-I", "-c", "import toolhub_demo_a, pydantic; print(toolhub_demo_a.greet())"],
            user="toolhub-sandbox",
            group="toolhub-sandbox",
            extra_groups=[],
            env={"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"},
            cwd="/",
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "a sees b2\n"
    finally:
        shutil.rmtree(top)


@pytest.mark.slow
def test_it_reuses_an_environment_without_rebuilding(demo_index: DemoIndex, lock_a: str, tmp_path: Path) -> None:
    root = tmp_path / "envs"
    first = ensure(demo_index.settings, lock_a, root)
    marker = first / MARKER_NAME
    os.utime(marker, (1, 1))

    log = Log()
    started = time.monotonic()
    second = ensure(demo_index.settings, lock_a.replace("\n", "\r\n"), root, log=log)
    elapsed = time.monotonic() - started

    assert second == first
    assert log.commands() == []
    assert elapsed < 0.5
    assert marker.stat().st_mtime > 1
    assert [info.key for info in list_environments(root)] == [first.name]


def _finished_by_hand(root: Path, lock: str) -> Path:
    """A finished environment as far as finished_environment can tell: its marker in place."""
    key = environment_key(lock=lock, interpreter=INTERPRETER)
    (root / key).mkdir(parents=True)
    (root / key / MARKER_NAME).write_text(json.dumps({"key": key}))
    return root / key


def test_a_finished_environment_is_checked_in_full_once_a_minute_while_its_marker_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock, root = "# python 3.11\nsix==1.16.0\n", tmp_path / "envs"
    env = _finished_by_hand(root, lock)
    checks: list[Path] = []
    complete = environments._is_complete
    monkeypatch.setattr(environments, "_is_complete", lambda path, key: checks.append(path) or complete(path, key))

    def finished() -> Path | None:
        return environments.finished_environment(lock=lock, root=root, interpreter=INTERPRETER, log=Log())

    # A tool call asks before every run: the marker is read, and the use recorded, once.
    os.utime(env / MARKER_NAME, (1, 1))
    assert [finished() for _ in range(3)] == [env] * 3
    assert checks == [env] and (env / MARKER_NAME).stat().st_mtime > 1
    # Once the recheck interval has passed, the whole check again.
    monkeypatch.setattr(environments, "FINISHED_RECHECK_SECONDS", 0.0)
    assert finished() == env and checks == [env, env]
    monkeypatch.setattr(environments, "FINISHED_RECHECK_SECONDS", 60.0)
    assert finished() == env and len(checks) == 2
    # Removed (renamed away, then deleted): never the answer again, not even within the minute.
    assert remove_environment(root, env.name) is True
    assert finished() is None


def test_the_key_depends_on_the_lock_and_the_interpreter(lock_a: str) -> None:
    key = environment_key(lock=lock_a, interpreter=INTERPRETER)
    assert key == environment_key(lock=lock_a.rstrip("\n") + "\n\n", interpreter=INTERPRETER)
    assert key != environment_key(lock=lock_a + "six==1.16.0\n", interpreter=INTERPRETER)
    assert key != environment_key(lock=lock_a, interpreter=sys.executable)


@pytest.mark.slow
def test_a_directory_without_the_marker_is_never_used(demo_index: DemoIndex, lock_a: str, tmp_path: Path) -> None:
    root = tmp_path / "envs"
    key = environment_key(lock=lock_a, interpreter=INTERPRETER)
    (root / key / "lib").mkdir(parents=True)
    (root / key / "planted").write_text("not from a build")

    log = Log()
    env = ensure(demo_index.settings, lock_a, root, log=log)

    assert not (env / "planted").exists()
    assert (env / MARKER_NAME).exists()
    assert any("no completion marker" in line for line in log)


@pytest.mark.slow
def test_a_failing_package_build_fails_with_a_reason_and_leaves_nothing(demo_index: DemoIndex, tmp_path: Path) -> None:
    lock = lock_for(demo_index, tmp_path / "work", ["toolhub-demo-broken"])
    root = tmp_path / "envs"
    log = Log()
    with pytest.raises(BuildFailed) as failure:
        ensure(demo_index.settings, lock, root, log=log)
    assert failure.value.reason == (
        "toolhub-demo-broken failed to build: RuntimeError: toolhub-demo-broken refuses to build"
    )
    assert any("made to fail its build" in line for line in log)
    assert leftovers(root) == []
    assert list_environments(root) == []


@pytest.mark.slow
def test_a_tampered_lock_fails_on_the_hash(demo_index: DemoIndex, lock_a: str, tmp_path: Path) -> None:
    digest = lock_a.split("toolhub-demo-a==1.0 \\\n    --hash=sha256:")[1][:64]
    tampered = lock_a.replace(digest, "0" * 64)
    with pytest.raises(BuildFailed) as failure:
        ensure(demo_index.settings, tampered, tmp_path / "envs")
    assert failure.value.reason.startswith("hash mismatch for toolhub-demo-a")


@pytest.mark.slow
def test_building_from_an_unreachable_index_fails_quickly(lock_a: str, tmp_path: Path) -> None:
    root = tmp_path / "envs"
    started = time.monotonic()
    with pytest.raises(BuildFailed) as failure:
        ensure(UNREACHABLE, lock_a, root)
    assert failure.value.reason == "index unreachable: 127.0.0.1:9 (Connection refused)"
    assert time.monotonic() - started < 20
    assert leftovers(root) == []


def test_it_refuses_an_interpreter_the_sandbox_user_cannot_reach(
    demo_index: DemoIndex, lock_a: str, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python3").symlink_to(INTERPRETER)
    with pytest.raises(BuildFailed) as failure:
        ensure_environment(
            lock=lock_a,
            root=tmp_path / "envs",
            interpreter=str(private / "python3"),
            index=demo_index.settings,
            log=Log(),
            timeouts=FAST,
        )
    assert "not searchable by other users" in failure.value.reason


@pytest.mark.slow
def test_package_builds_do_not_see_the_workers_secrets(
    demo_index: DemoIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo_index.build_record.unlink(missing_ok=True)
    lock = lock_for(demo_index, tmp_path / "work", ["toolhub-demo-slow"])
    monkeypatch.setenv("SECRET_KEY", "fake-secret-for-the-test")
    monkeypatch.setenv("DATABASE_URL", "postgres://toolhub:hunter2@db/toolhub")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    ensure(demo_index.settings, lock, tmp_path / "envs")
    [build] = demo_index.slow_builds()
    demo_index.build_record.unlink()
    assert not {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"} & set(build["env"])
    assert "HOME" in build["env"]


@pytest.mark.slow
def test_list_and_remove_environments(demo_index: DemoIndex, lock_a: str, tmp_path: Path) -> None:
    root = tmp_path / "envs"
    env = ensure(demo_index.settings, lock_a, root)

    [info] = list_environments(root)
    assert info.key == env.name
    assert info.path == env
    assert info.interpreter == INTERPRETER
    assert info.python_version.startswith("3.11")
    assert info.size_bytes > 1_000_000
    assert info.last_used_at >= info.created_at.replace(microsecond=0)

    assert remove_environment(root, env.name) is True
    assert not env.exists()
    assert list_environments(root) == []
    assert leftovers(root) == []
    assert remove_environment(root, env.name) is False
    with pytest.raises(ValueError):
        remove_environment(root, "../etc")


def test_remove_partial_builds_spares_a_build_in_progress(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    busy, idle = "a" * 64, "b" * 64
    for key in (busy, idle):
        (root / f".tmp-{key}-x1y2").mkdir(parents=True)
    with environments._key_lock(root, busy, wait_seconds=0, log=Log()):
        assert remove_partial_builds(root) == [f".tmp-{idle}-x1y2"]
    assert (root / f".tmp-{busy}-x1y2").exists()


# --------------------------------------------------------------------------------------------
# Crashes, concurrency and timeouts (these use toolhub-demo-slow, whose build waits at a gate)


def _ensure_in_child(lock: str, root: str, settings: IndexSettings, log_path: str) -> None:
    """Target of the child processes below; its log goes to a file the test reads."""
    with open(log_path, "a", buffering=1) as log_file:
        env = ensure_environment(
            lock=lock,
            root=Path(root),
            interpreter=INTERPRETER,
            index=settings,
            log=lambda line: log_file.write(line + "\n"),
            timeouts=FAST,
        )
        log_file.write(f"RESULT {env}\n")


def _start_child(lock: str, root: Path, settings: IndexSettings, log_path: Path):
    # Spawned, not forked: by the time these tests run in a full session the test process has
    # threads of earlier tests (warm-pool reapers, egress proxies, database connections), and a
    # fork copies whatever lock one of them held at that moment into a child that can then wait
    # on it for ever (the first child here once never started its build within 60 s).
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_ensure_in_child, args=(lock, str(root), settings, str(log_path)))
    child.start()
    return child


@pytest.fixture
def children() -> Iterator[list]:
    started: list = []
    yield started
    for child in started:
        if child.is_alive():
            child.kill()
        child.join(10)


@pytest.mark.slow
def test_a_build_killed_midway_leaves_nothing_usable_and_the_next_call_builds_cleanly(
    slow_gate: DemoIndex, slow_lock: str, tmp_path: Path, children: list
) -> None:
    root = tmp_path / "envs"
    key = environment_key(lock=slow_lock, interpreter=INTERPRETER)
    child = _start_child(slow_lock, root, slow_gate.settings, tmp_path / "child.log")
    children.append(child)
    build = slow_gate.wait_for_slow_build()

    # uv is installing right now; the worker dies without any chance to clean up.
    [partial] = root.glob(f".tmp-{key}-*")
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)

    assert not (root / key).exists()
    assert not (partial / MARKER_NAME).exists()
    assert list_environments(root) == []
    # The tools died with the worker instead of writing on into the directory.
    deadline = time.monotonic() + 10
    while processes_mentioning(partial.name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_mentioning(partial.name) == []

    slow_gate.gate.unlink()
    assert wait_until_gone(build["pid"])
    log = Log()
    env = ensure(slow_gate.settings, slow_lock, root, log=log)
    assert env == root / key
    assert f"removing unfinished build {partial.name}" in log
    assert leftovers(root) == []
    subprocess.run([environment_python(env), "-c", "import toolhub_demo_slow"], check=True)


@pytest.mark.slow
def test_concurrent_builds_of_one_key_build_once(
    slow_gate: DemoIndex, slow_lock: str, tmp_path: Path, children: list
) -> None:
    root = tmp_path / "envs"
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    children.append(_start_child(slow_lock, root, slow_gate.settings, logs[0]))
    slow_gate.wait_for_slow_build()
    children.append(_start_child(slow_lock, root, slow_gate.settings, logs[1]))
    deadline = time.monotonic() + 30
    while not logs[1].exists() or "waiting for it" not in logs[1].read_text():
        assert time.monotonic() < deadline, "the second process never waited"
        time.sleep(0.05)

    slow_gate.gate.unlink()
    for child in children:
        child.join(60)
        assert child.exitcode == 0

    texts = [path.read_text() for path in logs]
    results = {line for text in texts for line in text.splitlines() if line.startswith("RESULT")}
    assert len(results) == 1
    assert len(slow_gate.slow_builds()) == 1
    assert sum(text.count("uv pip install") for text in texts) == 1
    assert "was built meanwhile; reusing it" in texts[1]
    assert leftovers(root) == []


@pytest.mark.slow
def test_a_silent_build_is_stopped_and_its_processes_killed(
    slow_gate: DemoIndex, slow_lock: str, tmp_path: Path
) -> None:
    root = tmp_path / "envs"
    started = time.monotonic()
    with pytest.raises(BuildFailed) as failure:
        ensure(slow_gate.settings, slow_lock, root, timeouts=Timeouts(total_seconds=60, silence_seconds=1.5))
    assert failure.value.reason == "no output for 1.5 s"
    assert time.monotonic() - started < 30
    [build] = slow_gate.slow_builds()
    # The package's build backend ran as uv's child; killing the group reached it too.
    assert wait_until_gone(build["pid"], timeout=5)
    assert leftovers(root) == []


@pytest.mark.slow
def test_a_build_past_its_total_time_is_stopped(slow_gate: DemoIndex, slow_lock: str, tmp_path: Path) -> None:
    root = tmp_path / "envs"
    with pytest.raises(BuildFailed) as failure:
        ensure(slow_gate.settings, slow_lock, root, timeouts=Timeouts(total_seconds=3, silence_seconds=60))
    assert failure.value.reason == "build timed out after 3 s"
    assert leftovers(root) == []


# --------------------------------------------------------------------------------------------
# The command runner


def run(code: str, *, log: Log, silence: float = 30, total: float = 30) -> build_runner.Outcome:
    timeouts = Timeouts(total_seconds=total, silence_seconds=silence)
    with tempfile.TemporaryDirectory() as home:
        return build_runner.run_logged(
            [sys.executable, "-c", code],
            env=build_runner.tool_env(home=Path(home), timeouts=timeouts, extra={}),
            cwd=Path(home),
            log=log,
            deadline=time.monotonic() + total,
            timeouts=timeouts,
            stage="build",
        )


def test_the_runner_streams_lines_as_they_come() -> None:
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    outcome = run(
        "import time; print('one', flush=True); time.sleep(1); print('two'); print('no newline', end='')",
        log=lambda line: arrivals.append((time.monotonic() - started, line)),
    )
    lines = [line for _, line in arrivals]
    assert lines[1:] == ["one", "two", "no newline"]
    assert arrivals[1][0] < arrivals[2][0] - 0.5
    assert outcome.returncode == 0


def test_the_runner_stops_a_silent_command_and_its_children() -> None:
    log = Log()
    started = time.monotonic()
    with pytest.raises(BuildFailed) as failure:
        run(
            "import subprocess, time; child = subprocess.Popen(['sleep', '60']); "
            "print(child.pid, flush=True); time.sleep(60)",
            log=log,
            silence=0.5,
        )
    assert failure.value.reason == "no output for 0.5 s"
    assert time.monotonic() - started < 5
    assert wait_until_gone(int(log[1]), timeout=5)


def test_the_runner_stops_a_chatty_command_at_the_total_limit() -> None:
    started = time.monotonic()
    with pytest.raises(BuildFailed) as failure:
        run("import time\nwhile True:\n    print('.', flush=True); time.sleep(0.05)", log=Log(), silence=0.5, total=1)
    assert failure.value.reason == "build timed out after 1 s"
    assert time.monotonic() - started < 5


def test_the_runner_passes_an_allowlisted_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_KEY", "fake-secret-for-the-test")
    monkeypatch.setenv("DATABASE_URL", "postgres://toolhub:hunter2@db/toolhub")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("https_proxy", "http://proxy.internal:3128")
    log = Log()
    run("import json, os; print(json.dumps(dict(os.environ)))", log=log)
    seen = json.loads(log[1])
    assert "fake-secret" not in log[1] and "hunter2" not in log[1]
    assert not {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "PIP_INDEX_URL"} & set(seen)
    assert seen["PIP_CONFIG_FILE"] == os.devnull
    assert seen["UV_NO_CONFIG"] == "1"
    assert seen["HOME"] != os.environ.get("HOME")
    assert seen["https_proxy"] == "http://proxy.internal:3128"
    assert seen["LANG"] == "C.UTF-8"


def test_the_runner_hides_credentials_in_urls() -> None:
    log = Log()
    build_runner.run_logged(
        [sys.executable, "-c", "print('Looking in https://alice:s3cret@pypi.internal/simple')"],
        env={"PATH": "/usr/bin:/bin"},
        cwd=Path("/"),
        log=log,
        deadline=time.monotonic() + 30,
        timeouts=Timeouts(),
        stage="build",
    )
    assert log[1] == "Looking in https://***@pypi.internal/simple"
    assert all("s3cret" not in line for line in log)


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (
            "error: No solution found when resolving dependencies\n"
            "  cause: Because there is no version of toolhub-demo-b==3.0 and you require "
            "toolhub-demo-b==3.0, we can conclude that your requirements are unsatisfiable.",
            "No matching distribution for toolhub-demo-b==3.0",
        ),
        (
            "  × No solution found when resolving dependencies:\n"
            "  ╰─▶ Because nonexistent-pkg was not found in the package registry and you require "
            "nonexistent-pkg, we can conclude that your requirements are unsatisfiable.",
            "No matching distribution for nonexistent-pkg",
        ),
        (
            "error: Request failed after 2 retries\n"
            "  cause: Failed to fetch: https://***@pypi.internal/simple/humanize/\n"
            "  cause: dns error: failed to lookup address information: Name or service not known",
            "index unreachable: pypi.internal (Name or service not known)",
        ),
        (
            "error: Failed to install: pydantic_core-2.50.5-cp311-cp311-manylinux_2_17_x86_64.whl (pydantic-core==2.50.5)\n"
            "  Caused by: failed to write to file `/srv/envs/.tmp-x/lib/python3.11/site-packages/pydantic_core/_pydantic_core.so`: "
            "No space left on device (os error 28)",
            "uv pip install failed: the disk is full on this host (No space left on device)",
        ),
        (
            "error: Failed to download `torch==2.13.0`\n"
            "  Caused by: error decoding response body\n"
            "egress refused: byte limit reached (8589934592 bytes per invocation)",
            "uv pip install stopped at the build's download limit of 8 GiB",
        ),
        (
            "error: Request failed after 2 retries\n"
            "  Caused by: error sending request for url (https://pypi.example/simple/azure-core/)\n"
            "  Caused by: tunnel error: unsuccessful\n"
            "ToolHub egress refused 3 connections: more than 64 connections open at once",
            "uv pip install opened more than 64 connections at once through the build's egress proxy",
        ),
        ("error: the moon is in the wrong phase", "uv pip install failed: the moon is in the wrong phase"),
        ("", "uv pip install exited with status 2"),
    ],
)
def test_failures_are_explained_in_one_line(output: str, reason: str) -> None:
    outcome = build_runner.Outcome(returncode=2, lines=deque(output.splitlines()))
    assert build_runner.explain_failure("uv pip install", outcome, index_url=None).english() == reason


def test_the_build_sandbox_sees_the_local_places_packages_come_from(tmp_path: Path) -> None:
    # A file:// index with the directory above it (a mirror's pages link to ../../files/...),
    # find-links directories as given, the CA bundle; remote URLs need no path.
    settings = IndexSettings(
        index_url=f"file://{tmp_path}/mirror/simple", extra_index_urls=("https://pypi.example/simple",),
        find_links=(str(tmp_path / "wheels"), "https://example.org/wheels/"), cert=str(tmp_path / "ca.pem"),
    )
    assert settings.local_paths() == [str(tmp_path / "ca.pem"), str(tmp_path / "mirror"), str(tmp_path / "wheels")]


def test_builds_get_the_network_only_when_a_package_source_is_not_on_this_host(tmp_path: Path) -> None:
    assert IndexSettings().index_hosts() == (("pypi.org", 443), ("files.pythonhosted.org", 443))
    assert IndexSettings(find_links=(str(tmp_path),), no_index=True).index_hosts() == ()
    assert IndexSettings(index_url=f"file://{tmp_path}/simple", find_links=(str(tmp_path),)).index_hosts() == ()
    assert IndexSettings(
        index_url=f"file://{tmp_path}/simple", extra_index_urls=("https://u:p@X.example/simple",)
    ).index_hosts() == (("x.example", 443),)
    assert IndexSettings(find_links=("http://10.0.0.5:8080/wheels/",), no_index=True).index_hosts() == (
        ("10.0.0.5", 8080),
    )
