"""A uid per sandbox (toolhub.sandbox.uids): leases across processes, and two overlapping
sandboxes of different users that try every channel the kernel keys by uid, for real.

Needs what tests/sandbox/test_isolation.py needs plus the pool users `toolhub-sb-0000`.. created by
scripts/system-setup. Each test leases from its own lock directory; the uids are the host's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

pytest_plugins = ["tests.sandbox_fixtures"]

from tests.sandbox_fixtures import POOL_FIRST, REPO, SANDBOX_USER, require_sandbox, wait_for_no_sandbox_processes  # noqa: E402
from toolhub.sandbox.launcher import Limits, SandboxOutcome, SandboxUnavailable, run_sandboxed  # noqa: E402
from toolhub.sandbox.uids import UidPool, uids_with_processes, user_name  # noqa: E402

pytestmark = pytest.mark.sandbox

LIMITS = Limits(cpu_seconds=5, wall_seconds=20, memory_bytes=512 << 20, processes=32, exit_grace_seconds=0.5)


@pytest.fixture(autouse=True)
def _nothing_survives():
    require_sandbox()
    try:
        UidPool(first=POOL_FIRST, size=2, lock_dir=Path("/nonexistent")).users()
    except SandboxUnavailable as exc:
        if os.environ.get("TOOLHUB_REQUIRE_SANDBOX") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield
    left = wait_for_no_sandbox_processes()
    assert left == [], f"processes of the sandbox users survived the test: {left}"


def _pool_name(index: int) -> str:
    """The name of this test run's `index`th pool user (its range starts at POOL_FIRST)."""
    return user_name(POOL_FIRST + index)


@pytest.fixture
def pool(tmp_path: Path) -> UidPool:
    return UidPool(first=POOL_FIRST, size=4, lock_dir=tmp_path / "uid-locks", lease_timeout=30)


HOLDER = """
import sys
from pathlib import Path
from toolhub.sandbox.uids import UidPool
pool = UidPool(first=int(sys.argv[3]), size=int(sys.argv[2]), lock_dir=Path(sys.argv[1]), lease_timeout=30)
with pool.lease() as user:
    print(user.name, flush=True)
    sys.stdin.read()
"""


def _holder(pool: UidPool) -> tuple[subprocess.Popen, str]:
    """Another process that leases a uid from the same pool and holds it until stdin closes."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(pool.lock_dir), str(pool.size), str(pool.first)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def test_leases_are_exclusive_across_processes_and_end_with_their_holder(pool: UidPool) -> None:
    small = UidPool(first=POOL_FIRST, size=2, lock_dir=pool.lock_dir, lease_timeout=30)
    first, first_name = _holder(small)
    try:
        with small.lease() as mine:
            assert mine.name != first_name
            assert {mine.name, first_name} == {_pool_name(0), _pool_name(1)}
            # Both are taken: a third lease waits, then says why.
            hurried = UidPool(first=POOL_FIRST, size=2, lock_dir=pool.lock_dir, lease_timeout=0.3)
            started = time.monotonic()
            with pytest.raises(SandboxUnavailable, match="TOOLHUB_SANDBOX_UIDS"):
                with hurried.lease():
                    pass
            assert time.monotonic() - started >= 0.3
        # A holder killed outright gives its uid back: the kernel drops its lock.
        first.kill()
        first.wait()
        names = set()
        with small.lease() as one, small.lease() as two:
            names = {one.name, two.name}
        assert names == {_pool_name(0), _pool_name(1)}
    finally:
        first.kill()
        first.wait()


def test_a_uid_that_still_has_a_process_is_not_leased(pool: UidPool) -> None:
    single = UidPool(first=POOL_FIRST, size=1, lock_dir=pool.lock_dir, lease_timeout=0.3)
    user = pwd.getpwnam(_pool_name(0))
    leftover = subprocess.Popen(["/usr/bin/sleep", "30"], user=user.pw_uid, group=user.pw_gid, extra_groups=[])
    try:
        deadline = time.monotonic() + 5
        while user.pw_uid not in uids_with_processes() and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(SandboxUnavailable):
            with single.lease():
                pass
    finally:
        leftover.kill()
        leftover.wait()
    with UidPool(first=POOL_FIRST, size=1, lock_dir=pool.lock_dir, lease_timeout=30).lease() as leased:
        assert leased.uid == user.pw_uid


def _orphan_of(user: pwd.struct_passwd) -> int:
    """A process of `user` that nobody in this test waits for (its parent exits, so the host's
    init adopts it), as a sandbox outliving its killed worker is; its pid."""
    started = subprocess.run(
        ["/usr/bin/setsid", "-f", "/bin/sh", "-c", "echo $$; exec /usr/bin/sleep 600 </dev/null >/dev/null 2>&1"],
        user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True, text=True, check=True,
    )
    return int(started.stdout.split()[0])


def _gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.02)
    return False


def test_a_process_no_lease_holds_is_killed_and_its_uid_leased_again(pool: UidPool) -> None:
    single = UidPool(first=POOL_FIRST, size=1, lock_dir=pool.lock_dir, lease_timeout=10)
    user = pwd.getpwnam(_pool_name(0))
    orphan = _orphan_of(user)
    try:
        with single.lease() as leased:
            assert leased.uid == user.pw_uid
            assert _gone(orphan)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(orphan, 9)


def test_a_sweep_kills_what_no_lease_holds_and_spares_a_held_uid(pool: UidPool) -> None:
    two = UidPool(first=POOL_FIRST, size=2, lock_dir=pool.lock_dir, lease_timeout=10)
    first, second = pwd.getpwnam(_pool_name(0)), pwd.getpwnam(_pool_name(1))
    held = UidPool(first=POOL_FIRST, size=1, lock_dir=pool.lock_dir).acquire()
    assert held.user.uid == first.pw_uid
    orphans = [_orphan_of(first), _orphan_of(second)]
    try:
        try:
            assert two.sweep() == 1
            assert _gone(orphans[1])
            # The leased uid's process is its holder's business.
            assert os.path.exists(f"/proc/{orphans[0]}")
        finally:
            held.release()
        assert two.sweep() == 1
        assert _gone(orphans[0])
        assert two.sweep() == 0
    finally:
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


def test_a_pool_with_missing_users_says_how_to_create_them(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="scripts/system-setup"):
        UidPool(first=POOL_FIRST, size=2, prefix="toolhub-no-such-user-", lock_dir=tmp_path).check()


def test_the_lock_directory_is_roots_alone(pool: UidPool) -> None:
    pool.check()
    info = os.stat(pool.lock_dir)
    assert info.st_uid == 0 and info.st_mode & 0o777 == 0o700


@pytest.fixture
def run_in_pool(
    tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path, pool: UidPool
) -> Callable[..., SandboxOutcome]:
    def _run(source: str, *, arguments: dict | None = None, on_message=None, limits: Limits = LIMITS) -> SandboxOutcome:
        path = tmp_path / f"toolkit-{uuid.uuid4().hex[:8]}.py"
        path.write_text(textwrap.dedent(source))
        return run_sandboxed(
            interpreter_env=sandbox_env,
            runtime_dir=sandbox_runtime,
            source_path=path,
            request={
                "op": "invoke",
                "source_path": "/opt/toolkit/toolkit.py",
                "tool": "go",
                "arguments": arguments or {},
            },
            limits=limits,
            on_message=on_message or (lambda message: None),
            uid_pool=pool,
        )

    return _run


def _result(outcome: SandboxOutcome):
    assert outcome.status == "ok", outcome
    assert outcome.final is not None and outcome.final["kind"] == "result", outcome
    return outcome.final["result"]


IPC = """
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
KEY = 0x7015
IPC_CREAT = 0o1000

def sysv(call, *args):
    ctypes.set_errno(0)
    result = getattr(libc, call)(*args)
    return -ctypes.get_errno() if result == -1 else result
"""

# Run A: a "victim" holding what a user gave it, in every channel it can find, then waiting.
LEAKER = (
    IPC
    + """
class Tools:
    async def go(self, __event_call__) -> dict:
        secret = "a-secret-user-valve-of-user-a"
        open("/tmp/channel.txt", "w").write(secret)
        open("/dev/shm/channel", "w").write(secret)
        queue = sysv("msgget", KEY, IPC_CREAT | 0o666)
        segment = sysv("shmget", KEY, 4096, IPC_CREAT | 0o666)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind("\\0toolhub-channel")
        server.listen()
        payload = secret.encode()
        libc.syscall.restype = ctypes.c_long
        key = libc.syscall(ctypes.c_long(248), b"user", b"toolhub-channel", payload, len(payload), ctypes.c_long(-2))
        made = {"queue": queue >= 0, "segment": segment >= 0, "key": key}
        await __event_call__({"type": "input", "data": {"uid": os.getuid(), "made": made}})
        # Still all there after B tried: B could not remove them either.
        made["after"] = [os.path.exists("/tmp/channel.txt"), os.path.exists("/dev/shm/channel"),
                         sysv("msgget", KEY, 0) >= 0]
        return made
"""
)

# Run B: another user's toolkit, concurrently, looking for A's traces everywhere.
SNOOPER = (
    IPC
    + """
class Tools:
    def go(self, host_pids: list) -> dict:
        found = {}
        found["uid"] = os.getuid()
        found["tmp"] = sorted(os.listdir("/tmp"))
        found["shm"] = sorted(os.listdir("/dev/shm"))
        found["msgget"] = sysv("msgget", KEY, 0)
        found["shmget"] = sysv("shmget", KEY, 0, 0)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect("\\0toolhub-channel")
            found["abstract"] = "connected"
        except OSError as exc:
            found["abstract"] = type(exc).__name__
        signals = {}
        for pid in host_pids:
            try:
                os.kill(pid, 0)
                signals[pid] = "reachable"
            except OSError as exc:
                signals[pid] = type(exc).__name__
        found["signals"] = sorted(set(signals.values()))
        try:
            os.kill(-1, 15)
            found["kill_all"] = "sent"
        except OSError as exc:
            found["kill_all"] = type(exc).__name__
        found["proc"] = sorted(p for p in os.listdir("/proc") if p.isdigit())
        readable = []
        for pid in host_pids:
            if os.path.exists(f"/proc/{pid}/environ"):
                readable.append(pid)
        found["proc_of_a"] = readable
        try:
            found["proc_keys"] = open("/proc/keys").read()
        except OSError as exc:
            found["proc_keys"] = type(exc).__name__
        libc.syscall.restype = ctypes.c_long
        found["keyctl"] = libc.syscall(ctypes.c_long(250), 0, ctypes.c_long(-4), 0)  # user keyring id
        return found
"""
)


def test_two_overlapping_runs_of_different_users_cannot_pass_anything(run_in_pool) -> None:
    seen: dict = {}

    def on_message(message: dict) -> dict | None:
        if message.get("kind") != "call":
            return None
        uid_a = message["event"]["data"]["uid"]
        seen["a"] = message["event"]["data"]
        # The host's pids of every process of A's uid: B gets them to aim signals at.
        host_pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _owner(p) == uid_a]
        seen["host_pids"] = host_pids
        seen["b"] = _result(run_in_pool(SNOOPER, arguments={"host_pids": host_pids}))
        return {"kind": "call_result", "call_id": message["call_id"], "value": "go on"}

    after = _result(run_in_pool(LEAKER, on_message=on_message))
    a, b = seen["a"], seen["b"]
    pool_uids = {pwd.getpwnam(_pool_name(i)).pw_uid for i in range(4)}
    # Each ran as a pool uid of its own, not the shared sandbox user.
    assert a["uid"] in pool_uids and b["uid"] in pool_uids and a["uid"] != b["uid"]
    assert pwd.getpwnam(SANDBOX_USER).pw_uid not in (a["uid"], b["uid"])
    # A did manage to create its queue and segment; the key was refused by the filter.
    assert a["made"] == {"queue": True, "segment": True, "key": -1}
    assert seen["host_pids"], "A's processes should have been visible to the host"
    assert b["tmp"] == [] and b["shm"] == []
    assert b["msgget"] < 0 and b["shmget"] < 0
    assert b["abstract"] in ("ConnectionRefusedError", "FileNotFoundError")
    assert b["signals"] == ["ProcessLookupError"]
    assert b["kill_all"] == "ProcessLookupError"
    assert b["proc"] == ["1"] and b["proc_of_a"] == []
    assert b["proc_keys"] == "PermissionError"
    assert b["keyctl"] == -1
    assert after["after"] == [True, True, True]


def _owner(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


def test_rlimit_nproc_is_the_runs_own_with_a_leased_uid(run_in_pool) -> None:
    outcome = run_in_pool(
        """
        import resource
        class Tools:
            def go(self) -> list:
                return list(resource.getrlimit(resource.RLIMIT_NPROC))
        """
    )
    # The count is this run's alone, not every sandbox's: processes + 1 for bubblewrap, and
    # one more where the pids cgroup (which says it was hit) is to stop a fork bomb first.
    expected = LIMITS.processes + (2 if outcome.cgroups else 1)
    assert _result(outcome) == [expected, expected]


def test_a_fork_bomb_on_a_leased_uid_is_stopped_and_the_uid_comes_back(run_in_pool, pool: UidPool) -> None:
    outcome = run_in_pool(
        """
        import os
        class Tools:
            def go(self) -> str:
                while True:
                    try:
                        os.fork()
                    except OSError:
                        pass
        """,
        limits=replace(LIMITS, wall_seconds=3, cpu_seconds=3),
    )
    assert outcome.status in ("limit_exceeded", "timed_out"), outcome
    assert outcome.final is None
    if outcome.cgroups:
        assert "processes" in outcome.limits_hit, outcome
    assert wait_for_no_sandbox_processes(timeout=5) == []
    # Its lease was dropped: nothing holds the pool's locks any more (leased one by one, as
    # sandboxes of other test sessions on a shared machine may run as some of these uids for
    # a moment, and a uid with a process is not leased).
    for _ in range(pool.size):
        with pool.lease():
            pass
    for name in pool.names():
        fd = os.open(pool.lock_dir / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


def test_the_worker_glue_leases_from_the_configured_pool(settings, tmp_path: Path) -> None:
    from toolhub.toolkits import sandboxing as glue

    settings.TOOLHUB_SANDBOX_UIDS = 3
    settings.TOOLHUB_SANDBOX_UID_FIRST = 7
    settings.TOOLHUB_SANDBOX_UID_LOCK_DIR = str(tmp_path / "locks")
    configured = glue.uid_pool()
    assert configured is not None and configured.names() == ["toolhub-sb-0007", "toolhub-sb-0008", "toolhub-sb-0009"]
    settings.TOOLHUB_SANDBOX_UIDS = 0
    assert glue.uid_pool() is None
